R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --seqlens 1k,4k,16k --causal both --kernel-times"
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  TEST_PROCS=8 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_fwd_hopper.py tests/test_bwd_hopper.py" PYTEST_K="p_operand or o_through_q or one_tile or p_in_registers" bash scripts/gpu_session.sh pytest
  AB_ROUNDS=2 AB_BUDGET=400 AB_TIMEOUT=70 AB_ENVS="FLASHTILE_GLUON_FWD_P_REGS=0;FLASHTILE_GLUON_FWD_CONFIG=64,128,3,240" AB_CMD="$B --headdims 64,128" bash scripts/gpu_session.sh ab ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=540 AB_TIMEOUT=60 AB_ENVS="FLASHTILE_GLUON_FWD_P_REGS=1;FLASHTILE_GLUON_FWD_P_REGS=1 FLASHTILE_GLUON_FWD_CONFIG=64,128,3,240" AB_CMD="$B --headdims 96" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "^│" $O/g1.log | tail -60; echo "#### GPU0"; tail -45 $O/g0.log
