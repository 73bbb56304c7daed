# Session 54, call 3 (~420 s): issue 7's grid in fp16 against cuDNN (d=64/128, 512-16k, both
# masks, fwd and fwd+bwd, kernel sums, one round), then its other shapes in bf16 (d=96 and
# d=256, and GQA 8:1 at d=128, 1k/4k/16k, both masks) for the fraction of d=128's TFLOP/s.
#   export OUT; CALL_S=420 bash docs/results/2026-12-07-s54-call3/call.sh
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 200 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --no-plot \
  --dtype fp16 --out $OUT/grid > $OUT/grid.log 2>&1; echo "fp16 grid rc $? at $((SECONDS - T0)) s"
left=$(( ${CALL_S:-420} - (SECONDS - T0) - 10 ))
timeout -s INT $(( left / 2 )) python3 -m flashtile bench --providers flashtile,cudnn \
  --mode fwd fwdbwd --causal both --seqlens 1k,4k,16k --kernel-times --headdims 96,128,256 \
  --no-plot --dtype bf16 --out $OUT/grid > $OUT/shapes.log 2>&1; echo "shapes rc $? at $((SECONDS - T0)) s"
left=$(( ${CALL_S:-420} - (SECONDS - T0) - 10 ))
timeout -s INT $left python3 -m flashtile bench --providers flashtile,cudnn \
  --mode fwd fwdbwd --causal both --seqlens 1k,4k,16k --kernel-times --headdims 128 --gqa 8 \
  --no-plot --dtype bf16 --out $OUT/grid > $OUT/gqa.log 2>&1; echo "gqa rc $? at $((SECONDS - T0)) s"
cp $OUT/grid/bench-*.json $OUT/ 2>/dev/null; rm -rf $OUT/grid
for f in $OUT/bench-*.json; do python3 scripts/grid_table.py $f | tail -14; done
echo "elapsed $((SECONDS - T0)) s"
