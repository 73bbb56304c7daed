# Session 48's second call: the forward matrix cases session 46 did not reach, now with names
# (-v, junit XML): call 1 of this session passed 30 of the 60 (0 failed) before its limit but
# ran with -q, so which 30 is not known; this run takes the list from its end (xdist hands
# out cases in order, so mostly the other half). On an H200 also the backward preprocess
# sweep (owed there since session 47).
export PYTHONPATH=$PWD/src; T0=$SECONDS; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
if echo "$GPU" | grep -q H200; then
  timeout 60 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json > $OUT/preprocess.log 2>&1
  tail -12 $OUT/preprocess.log
fi
timeout -s INT $((${CALL_S:-450} - (SECONDS - T0))) python3 -m pytest -v -rf -n 16 -p no:cacheprovider \
  --junitxml=$OUT/matrix.xml $(cat docs/results/2026-12-07-s48-call2/matrix-reversed.txt) \
  > $OUT/matrix.log 2>&1; echo "pytest rc $?"
grep -v Warning $OUT/matrix.log | grep -E "^FAILED|^ERROR" | head
echo "passed $(grep -c ' PASSED ' $OUT/matrix.log), failed $(grep -c ' FAILED ' $OUT/matrix.log)"
echo "elapsed $((SECONDS - T0)) s"
