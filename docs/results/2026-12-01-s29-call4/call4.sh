# session 29, call 4: the Gluon forward's configs at d=96 (its fraction of d=128's TFLOP/s fell
# to 0.77-0.85 in call 3), kernel sums, two alternating rounds; then the d=96 forward tests on
# the 3-slot config
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT; C=FLASHTILE_GLUON_FWD_CONFIG
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=290 AB_TIMEOUT=40 AB_COMPILE_S=40 AB_ENVS="$C=64,128,3,240;$C=64,64,4,240;$C=64,64,6,240" AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 96 --causal both --seqlens 1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -9 $O/a.log
( OUT=$O/t; export $C=64,128,3,240; TEST_PROCS=16 TESTS_TIMEOUT=90 PYTEST_ARGS="tests/test_fwd_hopper.py" PYTEST_K="96" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -3 $O/t.log
