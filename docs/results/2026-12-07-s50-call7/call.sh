# Session 50, call 7: GQA's per-query-head dK/dV summed by one recorded Triton launch
# (bwd._sum_head_groups, dK and dV together) instead of two torch sums as closing copies:
# the GPU tests that run it (per-query-head cases of both kernels, the plan replays of
# test_default_dq_pass, test_plans, the kernel's own test), then an A/B against the previous
# tree (.branches/torchsum: bf7d8c6, before the change, its src/ only), GQA 8:1 causal
# forward+backward at d=64/128, 1k/4k/16k, kernel sums, 2 rounds.
# NOT RUN in session 50 (no device time left): the change lives on branch s50-sum-head-groups.
# To run it: merge the branch into main, then, from main's tree,
#   mkdir -p .branches/torchsum && git archive <main before the merge> src | tar -x -C .branches/torchsum
# and call `run` with carry [".branches"] and
#   export OUT; CALL_S=290 bash docs/results/2026-12-07-s50-call7/call.sh
# Keep it only if the GPU tests pass and the A/B shows the sums' launch faster.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 120 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py tests/test_plans.py \
  -k "sum_head_groups or per_query_head or default_dq_pass or test_plans" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
AB_BUDGET=$((${CALL_S:-300} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=60 AB_COMPILE_S=30 \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 64,128 --gqa 8 --seqlens 1k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A12 "^flashtile, µs" $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
