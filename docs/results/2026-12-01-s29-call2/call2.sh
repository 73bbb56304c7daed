# session 29, call 2: the pairs forward (two query tiles a program) against main at the short
# causal points; its GPU tests first
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_kernels.py" PYTEST_K="pairs" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -4 $O/t.log
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=50 AB_COMPILE_S=90 AB_ENVS="FLASHTILE_FWD_PAIRS=1;FLASHTILE_FWD_PAIRS=1 FLASHTILE_GLUON_FWD=0" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,1k,2k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -12 $O/a.log
