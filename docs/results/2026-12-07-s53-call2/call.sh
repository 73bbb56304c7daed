# Session 53, call 2: FLASHTILE_GLUON_BWD_DYNAMIC=1 again (call 1: causal -2% to -6.5% of the
# fwd+bwd kernel sums, unmasked level; its GPU tests ran out of memory at -n 12).
# 1. GPU tests of the claimed grid, -n 6; 2. same-run A/B, d=128 bf16 fwd+bwd, causal 512-16k,
#    three rounds.
#   export OUT; CALL_S=300 bash docs/results/2026-12-07-s53-call2/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 110 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py -k "claimed" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
left=$(( ${CALL_S:-300} - (SECONDS - T0) - 5 ))
AB_BUDGET=$left AB_ROUNDS=3 AB_TIMEOUT=40 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --seqlens 512,1k,2k,4k,8k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A12 "^flashtile, µs" $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
