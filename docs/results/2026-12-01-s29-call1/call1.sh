# session 29, call 1: tile-level forward configs with 64-row x 128-key tiles (cuDNN's shape at
# d=64 causal) against the defaults, short sequences; and their GPU tests
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT
T="FLASHTILE_GLUON_FWD=0 FLASHTILE_FWD_BLOCK_M=64 FLASHTILE_FWD_BLOCK_N=128 FLASHTILE_FWD_WARPS=4"
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=380 AB_TIMEOUT=60 AB_COMPILE_S=60 AB_ENVS="$T FLASHTILE_FWD_STAGES=3;$T FLASHTILE_FWD_STAGES=2;FLASHTILE_GLUON_FWD=0 FLASHTILE_FWD_BLOCK_M=64 FLASHTILE_FWD_BLOCK_N=64 FLASHTILE_FWD_STAGES=3" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times --headdims 64,128 --causal both --seqlens 512,1k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -30 $O/a.log
( OUT=$O/t; env $T FLASHTILE_FWD_STAGES=2 TEST_PROCS=16 TESTS_TIMEOUT=120 PYTEST_ARGS="tests/test_kernels.py" PYTEST_K="gpu_matrix and (D32 or D64 or D96 or D128)" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -5 $O/t.log
