# (Run from branch s52-dq-cast at 633639f; the branch is deleted, its diff against main is
#  docs/experiments/dq-cast-in-kernel-s52.patch.)
# Session 52, call 9: FLASHTILE_GLUON_BWD_DQ_CAST=1 (branch s52-dq-cast): the rows kernel casts
# dQ's float32 accumulator into dQ itself, block by block, instead of the closing cast.
# 1. GPU tests of the cast (bf16 and fp16 cases of test_rows_dq_cast, the added-dK/dV case,
#    the plan replay); 2. same-run A/B against the closing cast, d=128 bf16, both masks.
#   export OUT; CALL_S=200 bash docs/results/2026-12-07-s52-call9/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 100 python3 -m pytest -q -rf -n 12 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py -k "dq_cast" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
left=$(( ${CALL_S:-200} - (SECONDS - T0) - 5 ))
AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=40 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DQ_CAST=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --seqlens 512,2k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A10 "^flashtile, µs" $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
