# Session 49, call 6 (CALL_S, default 270 s): GQA's one pass with dK/dV per query head
# (FLASHTILE_GLUON_BWD_EXPAND=1, opt-in): its bf16 GPU tests (gradients against float64 with
# NaN-poisoned outputs; a plan's record and replays bitwise equal to the full path), then an A/B
# of GQA 8:1 d=128 causal forward+backward at 1k/4k/16k, main against the variant, cuDNN in
# every run, kernel sums, 2 rounds. Call 5 measured the rows kernel at 700 / 1,674 / 5,730 us
# there against 444 / 1,442 / 5,362 for MHA of the same FLOPs.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 100 python3 -m pytest -v -rf -n 8 -p no:cacheprovider tests/test_bwdrows_hopper.py \
  tests/test_plans.py -k "(per_query_head and bf16) or per-query-head" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
AB_BUDGET=$((${CALL_S:-270} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=60 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -16 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
