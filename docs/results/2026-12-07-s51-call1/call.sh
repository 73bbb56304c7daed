# Session 51, call 1: two backward changes on the GPU, tests first, then same-run A/B.
# 1. GQA's per-query-head dK/dV summed by one recorded Triton launch (bwd._sum_head_groups)
#    instead of two torch sums (session 50's branch, merged): its GPU tests (the kernel, the
#    per-query-head cases of both kernels, the plan replays), then main against
#    .branches/torchsum (4a7d54d's src/, before the merge) at GQA 8:1 d=128 causal.
# 2. FLASHTILE_GLUON_BWD_ROWS_OVERLAP=1 (opt-in, bwdrows_hopper._tile_overlap: P stored and
#    dV issued before dS, so dS computes under dV; LSE/D rows a tile ahead): its GPU tests,
#    then main against the variable, MHA d=128 both masks.
# 3. FLASHTILE_GLUON_BWD256_DV_FIRST=1 (opt-in, bwd256_hopper._ds_tile: consumer 1 issues dV_1
#    before it computes dS^T): its GPU tests, then main against the variable, d=256 4k/16k.
# NOT RUN in session 51: every device start was refused (1,800 s of device time spent on
# refusals). To run it from this branch's tree (branch s51-backward, or main once merged):
#   mkdir -p .branches/torchsum && git archive 4a7d54d src | tar -x -C .branches/torchsum
# and call `run` with carry [".branches"] and
#   export OUT; CALL_S=560 bash docs/results/2026-12-07-s51-call1/call.sh
# Keep the sums' launch if its tests pass and the A/B shows it faster; the overlap and DV_FIRST
# stay opt-in unless their A/B shows them ahead at every point (then make them the default
# and drop the old orders). CALL_S: the seconds this script may take.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 120 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py tests/test_plans.py tests/test_bwd256_hopper.py \
  -k "sum_head_groups or per_query_head or default_dq_pass or test_plans or overlap or dv_first" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
left() { echo $(( ${CALL_S:-560} - (SECONDS - T0) )); }
mv .branches /tmp/branches-held      # (the overlap A/B: the main tree and its variable only)
AB_BUDGET=$(( $(left) / 3 )) AB_ROUNDS=2 AB_TIMEOUT=50 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD_ROWS_OVERLAP=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --seqlens 1k,4k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
mv $OUT/ab.log $OUT/ab-overlap.log; mv $OUT/ab.tgz $OUT/ab-overlap.tgz
grep -A10 "^flashtile, µs" $OUT/ab-overlap.log
AB_BUDGET=$(( $(left) / 2 )) AB_ROUNDS=2 AB_TIMEOUT=50 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD256_DV_FIRST=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 256 --seqlens 4k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
mv $OUT/ab.log $OUT/ab-dvfirst.log; mv $OUT/ab.tgz $OUT/ab-dvfirst.tgz
grep -A8 "^flashtile, µs" $OUT/ab-dvfirst.log
mv /tmp/branches-held .branches
AB_BUDGET=$(( $(left) - 5 )) AB_ROUNDS=2 AB_TIMEOUT=50 AB_COMPILE_S=30 \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
mv $OUT/ab.log $OUT/ab-sums.log; mv $OUT/ab.tgz $OUT/ab-sums.tgz
grep -A8 "^flashtile, µs" $OUT/ab-sums.log
echo "elapsed $((SECONDS - T0)) s"
