# Session 50, call 2: the skip tests (check_skip_masked built its stand-in tensors on the CPU
# since f5113a8: a test bug, mended), then session 49's next2.sh (A/B of
# FLASHTILE_GLUON_BWD_EXPAND=1 at GQA 8 d=64/128 x 1k/4k/16k x both masks).
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS
timeout -s INT 150 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py -k "skip_masked_tiles" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
CALL_S=$((${CALL_S:-480} - (SECONDS - T0))) bash docs/results/2026-12-07-s49-next/next2.sh
