# Session 45, call 1 (session 44's "call T"): both backward GPU test files on the defaults of
# session 44 (the rotated one pass at d=128 unmasked). -v -rf and SIGINT at the timeout, so a
# cut run still names its failures.
# (12 processes: five refused starts left 1,259 s of device time; the 16 host cores compile the
# Gluon variants, which -n 8 left half idle.)
export PYTHONPATH=$PWD/src; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 530 python3 -m pytest -v -rf -n 12 -p no:cacheprovider tests/test_bwdrows_hopper.py \
  tests/test_bwd_hopper.py > $OUT/bwd-tests.log 2>&1; echo "bwd tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/bwd-tests.log | head -20; tail -1 $OUT/bwd-tests.log
