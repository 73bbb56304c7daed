# Session 45, call 3 (session 44's calls C and B). C: the backward alone and inside
# forward+backward, ours and cuDNN's, unmasked d=64/128 at 4k/16k (session 44: the d=128 16k
# rows kernel took 12.1-12.4 ms inside the grid's forward+backward, 10.7-11.1 ms alone;
# prediction: if it is the card's clock, cuDNN's backward alone is ~10% faster too). B: issue
# 7's grid in fp16 (expected: d=64 causal fwd 512/1k back to ~0.87x/0.89x with the pin).
# SM clock / power sampled every 200 ms alongside (clocks-*.csv).
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
smi() { nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > $OUT/clocks-$1.csv 2>&1 & SMI=$!; }
smi bwd
timeout 200 python3 -m flashtile bench --providers flashtile,cudnn --mode bwd,fwdbwd \
  --causal no --headdims 64,128 --seqlens 4k,16k --kernel-times --rounds 2 --dtype bf16 \
  --out $OUT/bwd > $OUT/bwd.log 2>&1; echo "bwd rc $?"; kill $SMI
grep -E "geomean|WRONG" $OUT/bwd.log; python3 scripts/grid_table.py --lines $OUT/bwd/bench-*.json
smi fp16
timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 \
  --dtype fp16 --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"; kill $SMI
grep -E "geomean|WRONG" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
echo "elapsed $((SECONDS - T0)) s"
