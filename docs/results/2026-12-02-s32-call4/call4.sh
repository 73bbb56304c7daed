# Session 32, call 4 (about 330 s): the new rule (d=64 causal with at most 8 items per head,
# up to 1k keys, takes two passes: call 1 measured 0.972x against the late one pass).
# 1. tests/test_bwd_hopper.py on the GPU (the rule's default and forced
#    paths, bf16/fp16 against float64).
# 2. A/B at d=64 causal fwd+bwd 1k (changed) and 2k (unchanged, the control): the new default
#    against the old one (FLASHTILE_BWD_DQ=atomic FLASHTILE_GLUON_BWD_DQ_LATE=1), kernel sums,
#    with cuDNN in the same runs.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS="tests/test_bwd_hopper.py" TEST_PROCS=16 TESTS_TIMEOUT=110 \
  bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -4 $O/t.log
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=40 AB_COMPILE_S=40 AB_ENVS="FLASHTILE_BWD_DQ=atomic FLASHTILE_GLUON_BWD_DQ_LATE=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 1k,2k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -4 $O/b.log
