# Prepared in session 32 for the next session's first call (copy to
# docs/results/<date>-sNN-call1/call1.sh, commit, then run `bash <that path>`; about 520 s).
# 1. GPU tests of what session 32 changed without a GPU run: test_default_dq_pass (two passes
#    at d=64 causal 1k, its new 2k case) and FLASHTILE_GLUON_BWD_SKIP_MASKED=1 (the dK/dV
#    kernel's second consumer skips the causal tiles wholly above its keys).
# 2. A/B of the skip (causal, MHA), fwd+bwd kernel sums at 512/1k/2k/4k: d=64 (two passes to
#    1k, one pass from 2k), d=96 (two passes), d=128 (the rows kernel's one pass).
#    Prediction: d=64 -2% to -4% at 512, -1% to -3% at 1k (the dK/dV kernel's products -10% /
#    -5%; the forward and dQ unchanged), -1% to -2% at 2k, about -0.5% at 4k (one pass: 4 of
#    5 products of one tile in n_i); d=96 -1% to -3%; d=128 -3% to -6% at 512, -2% to -3.5% at
#    1k, -1% to -2% at 2k (4.5 of 5 products of one tile in n_i), less where latency binds.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS="tests/test_bwd_hopper.py" PYTEST_K="skip_masked or default_dq_pass" \
  TEST_PROCS=16 TESTS_TIMEOUT=150 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -4 $O/t.log
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=360 AB_TIMEOUT=90 AB_COMPILE_S=40 AB_ENVS="FLASHTILE_GLUON_BWD_SKIP_MASKED=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64,96,128 --causal yes --seqlens 512,1k,2k,4k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -6 $O/b.log
