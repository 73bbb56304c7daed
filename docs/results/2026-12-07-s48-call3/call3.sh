# Session 48's third call (CALL_S, default 150 s): the 29 matrix cases of the unreached 60 that no run has
# yet named as passed (call 2 named 31; call 1b's 30 were unnamed), and --power's GPU test,
# with FLASHTILE_AUTOTUNE=0 (the conftest default since session 48; calls 1b and 2 ran with the
# tuner on, the likely reason a case took ~190 s of a worker).
# On an H200 it first runs the backward preprocess sweep (~20 s), owed there since session 47.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
if echo "$GPU" | grep -q H200; then
  timeout 60 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json > $OUT/preprocess.log 2>&1
  tail -12 $OUT/preprocess.log
fi
timeout -s INT $((${CALL_S:-150} - (SECONDS - T0))) python3 -m pytest -v -rf -n 16 -p no:cacheprovider --junitxml=$OUT/matrix.xml \
  tests/test_bench_power.py::test_power_on_gpu $(cat docs/results/2026-12-07-s48-call3/unnamed.txt) \
  > $OUT/matrix.log 2>&1; echo "pytest rc $?"
grep -v Warning $OUT/matrix.log | grep -E "^FAILED|^ERROR" | head
echo "passed $(grep -c ' PASSED ' $OUT/matrix.log), failed $(grep -c ' FAILED ' $OUT/matrix.log)"
echo "elapsed $((SECONDS - T0)) s"
