# Prepared in session 51 (no device time was left to run it): where issues 5 and 7 stand on
# the card the device gives (the anchors are an H200's; sessions 47-50 got H100s), then where
# the d=128 backward's warps wait at 16k. Steps: issue 7's bf16 grid against cuDNN (d=64/128,
# 512-16k, both masks, fwd and fwd+bwd, kernel sums, one round); Nsight Compute's stall samples
# per SASS instruction of the rows kernel and cuDNN's bprop at d=128 16k, causal and not
# (gpu_session.sh stallsrc: the 0.91-0.97x of the 16k forward+backward: the rows kernel's two
# copies of the tile loop (no_instruction), its dS hand-over (barrier), or operand waits).
#   export OUT; bash docs/results/2026-12-07-s51-call2/call.sh      (~300 s)
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 200 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 \
  --dtype bf16 --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG|note" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
STALL_POINTS="128:16384:causal 128:16384" STALL_MODE=fwdbwd STALL_KERNEL="dkdv|bprop" \
  STALL_TIMEOUT=90 STALL_TOP=25 bash scripts/gpu_session.sh stallsrc
cd $OUT && tar czf x.tgz stallsrc grid && rm -rf stallsrc grid && cd - > /dev/null
echo "elapsed $((SECONDS - T0)) s"
