R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src; O=$OUT; export FLASHTILE_TEST_GPUS=1
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_fwd_hopper.py" PYTEST_K="pingpong" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -6 $O/t.log
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=60 AB_COMPILE_S=60 AB_ENVS="FLASHTILE_GLUON_FWD_PINGPONG=1" AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 64,128 --causal no --seqlens 512,1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -14 $O/a.log
