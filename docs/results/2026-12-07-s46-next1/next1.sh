# Session 46's prepared call for the next session (one call, ~550 s at most).
# 1. The 73 forward matrix cases session 46's call 2 did not reach (matrix-ids.txt; 5 of them
#    d=64 causal up to 1,023 keys, the pinned 64x64/4w/3s) and --power's GPU test.
# 2. Issue 7's bf16 grid, 3 rounds, with --power: each point's SM clock, power and power-cap
#    share beside its time (session 46: the card at its 700 W cap for a third of the grid, the
#    clock down to 1,545 MHz; our 16k readings moved 5-10% between calls, cuDNN's 1-3%).
# 3. The 16k unmasked forward+backward after 2 s of warm-up (--warmup 2000): each provider
#    timed at its own steady clock rather than at the heat its predecessor left.
# At most 8 files under $OUT come back: no plots.
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import pynvml" || echo "no pynvml here: --power will report nothing"
D=docs/results/2026-12-07-s46-next1; mapfile -t IDS < $D/matrix-ids.txt
timeout -s INT 120 python3 -m pytest -v -rf -n 12 -p no:cacheprovider "${IDS[@]}" \
  tests/test_bench_power.py > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head; tail -1 $OUT/tests.log
timeout -s INT 250 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 3 \
  --power --dtype bf16 --no-plot --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG|note|while timed" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
python3 scripts/grid_table.py --lines $OUT/grid/bench-*.json | grep -E "s=(512|4k|16k)"
timeout -s INT 150 python3 -m flashtile bench --providers flashtile,cudnn --mode fwdbwd --causal no \
  --seqlens 16k --headdims 64,128 --kernel-times --rounds 2 --power --warmup 2000 \
  --dtype bf16 --no-plot --out $OUT/steady > $OUT/steady.log 2>&1; echo "steady rc $?"
grep -E "while timed" $OUT/steady.log
python3 scripts/grid_table.py --lines $OUT/steady/bench-*.json
echo "elapsed $((SECONDS - T0)) s"
