# Session 53, call 1: the rows kernel's items claimed at run time (FLASHTILE_GLUON_BWD_DYNAMIC=1:
# one program per SM, each item after a program's first claimed from a count the preprocess
# zeroes, so causal items of unequal length balance as with a program per item while each
# item's K/V load and dK/dV epilogue overlap the next item).
# 1. GPU tests: the claimed grid (MHA, GQA 4:1, causal GQA 3:1 per query head; plan replay),
#    the default rows cases and the static persistent grid (regressions);
# 2. same-run A/B against main's grid, d=128 bf16 fwd+bwd kernel sums, both masks.
#   export OUT; CALL_S=300 bash docs/results/2026-12-07-s53-call1/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 120 python3 -m pytest -q -rf -n 12 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py -k "claimed or rows_layout or persistent_grid" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
left=$(( ${CALL_S:-300} - (SECONDS - T0) - 5 ))
AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=45 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --seqlens 1k,2k,4k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A12 "^flashtile, µs" $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
