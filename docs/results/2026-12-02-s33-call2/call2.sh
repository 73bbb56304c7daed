# Session 33 call 2 (about 560 s): the skip of masked tiles now on by default up to 1k keys
# (bwd_hopper.skips_masked, SKIP_UPTO = 8 items per head).
# 1. GPU tests of the backward files with the new default (the skip's own cases, the dQ-pass
#    rule, the kernels' and SDPA's gradients, varlen), per-test times kept as JUnit XML (to
#    balance the whole suite's shards by time later).
# 2. A/B at d=128 GQA 8:1 causal (the rows kernel's skip with HEADS_INNER, now default and
#    not yet measured): main (skip) against FLASHTILE_GLUON_BWD_SKIP_MASKED=0.
#    Prediction: -1% to -4% at 512/1k (4.5 of 5 products of each head's first tile, the same
#    share as MHA), if the query-tile ring order costs nothing; 2k: off by default, neutral.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS="--junitxml=$O/t/junit.xml tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py tests/test_kernels.py tests/test_sdpa.py tests/test_varlen.py tests/test_dq_hopper.py tests/test_interface.py" \
  TEST_PROCS=16 TESTS_TIMEOUT=360 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -8 $O/t.log
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=50 AB_COMPILE_S=30 AB_ENVS="FLASHTILE_GLUON_BWD_SKIP_MASKED=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 128 --gqa 8 --causal yes --seqlens 512,1k,2k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -6 $O/b.log
