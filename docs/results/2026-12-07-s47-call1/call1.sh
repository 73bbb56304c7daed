# Session 47's first call (one call, ~570 s at most): session 46's prepared next1.sh, with
# the 16k warm-up step cut to 110 s, and the backward preprocess sweep first
# (scripts/preprocess_sweep.py: session 46's grid has our preprocess at 79.6 µs against
# cuDNN's compute_dot_do_o at 68-70 µs, at every sequence length).
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import pynvml" || echo "no pynvml here: --power will report nothing"
timeout -s INT 100 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json \
  > $OUT/preprocess.log 2>&1; echo "sweep rc $?"; cat $OUT/preprocess.log | tail -40
D=docs/results/2026-12-07-s46-next1; mapfile -t IDS < $D/matrix-ids.txt
timeout -s INT 110 python3 -m pytest -v -rf -n 12 -p no:cacheprovider "${IDS[@]}" \
  tests/test_bench_power.py > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head; tail -1 $OUT/tests.log
timeout -s INT 230 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 3 \
  --power --dtype bf16 --no-plot --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG|note|while timed" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
python3 scripts/grid_table.py --lines $OUT/grid/bench-*.json | grep -E "s=(512|4k|16k)"
timeout -s INT 100 python3 -m flashtile bench --providers flashtile,cudnn --mode fwdbwd --causal no \
  --seqlens 16k --headdims 64,128 --kernel-times --rounds 2 --power --warmup 2000 \
  --dtype bf16 --no-plot --out $OUT/steady > $OUT/steady.log 2>&1; echo "steady rc $?"
grep -E "while timed" $OUT/steady.log
python3 scripts/grid_table.py --lines $OUT/steady/bench-*.json
echo "elapsed $((SECONDS - T0)) s"
