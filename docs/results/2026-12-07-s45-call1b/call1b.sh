# Session 45, call 1b: call 1 cut to what thirteen refused starts left (~410 s of device time).
# Both backward GPU test files on session 44's default (the rotated one pass at d=128
# unmasked), less two groups whose paths the default does not change: test_rotated_items (its
# 40 cases force the rotation, the path now default at d=128; they passed on the GPU in
# session 44's call 1, and the kernel's code has not changed since apart from 3bc2ca5, whose
# SASS is identical) and test_serial_order (d=64 alone, where the rotation is off). Then the
# tile-level forward's d=64 causal matrix cases (up to 1,023 keys: the pinned 64x64/4w/3s).
# -v -rf and SIGINT at the timeout, so a cut run still names its failures.
export PYTHONPATH=$PWD/src; nvidia-smi --query-gpu=name --format=csv,noheader; T0=$SECONDS
timeout -s INT 300 python3 -m pytest -v -rf -n 12 -p no:cacheprovider tests/test_bwdrows_hopper.py \
  tests/test_bwd_hopper.py -k "not test_rotated_items and not test_serial_order" \
  > $OUT/bwd-tests.log 2>&1; echo "bwd tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/bwd-tests.log | head -20; tail -1 $OUT/bwd-tests.log
timeout -s INT 50 python3 -m pytest -v -rf -n 6 -p no:cacheprovider \
  "tests/test_kernels.py::test_gpu_matrix" -k "D64 and causal" > $OUT/fwd-tests.log 2>&1
echo "fwd tests rc $?"; grep -E "^FAILED|^ERROR" $OUT/fwd-tests.log | head; tail -1 $OUT/fwd-tests.log
echo "elapsed $((SECONDS - T0)) s"
