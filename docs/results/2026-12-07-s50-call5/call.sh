# Session 50, call 5: call 4's two failures again: test_default_dq_pass (its label check now
# reads the " per query head" suffix; a d=64 GQA causal 2k case added) and
# test_persistent_grid (out of memory beside 7 other workers in call 4), with 4 workers.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 200 python3 -m pytest -v -rf -n 4 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py -k "test_default_dq_pass or test_persistent_grid or test_per_query_head_default" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
echo "elapsed $((SECONDS - T0)) s"
