# Session 44, call 4 (inline, recorded here): both backward GPU test files with the rotation
# forced everywhere (d=64 too). Cut by its own timeout at ~90% with 10 F; -q named none (the
# next such run takes -rf and a per-test log).
export OUT PYTHONPATH=$PWD/src; FLASHTILE_GLUON_BWD_ROTATE=1 timeout 420 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "FAILED|ERROR" $OUT/tests.log | head -20; tail -2 $OUT/tests.log
