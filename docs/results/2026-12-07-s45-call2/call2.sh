# Session 45, call 2 (session 44's "call A"): the Gluon forward's GPU tests and the tile-level
# forward's matrix (d=64 causal up to 1,023 keys now takes the pinned 64x64/4w/3s), then issue
# 7's grid in bf16, two rounds, cuDNN in the same run, on the defaults of session 44 (the
# rotated one pass at d=128 unmasked). The SM clock, power and throttle reasons are sampled
# every 200 ms alongside (clocks.csv), to tell the card's clock from a kernel's time.
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 280 python3 -m pytest -v -rf -n 12 -p no:cacheprovider tests/test_fwd_hopper.py \
  "tests/test_kernels.py::test_gpu_matrix" > $OUT/fwd-tests.log 2>&1; echo "fwd tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/fwd-tests.log | head; tail -1 $OUT/fwd-tests.log
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > $OUT/clocks.csv 2>&1 & SMI=$!
timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 \
  --dtype bf16 --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"; kill $SMI
grep -E "geomean|WRONG" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
echo "elapsed $((SECONDS - T0)) s"
