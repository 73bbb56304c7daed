R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
AB="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode bwd --headdims 64 --causal both --kernel-times"
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  PYTEST_ARGS="tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py" PYTEST_K="rows or bench_rows_name" bash scripts/gpu_session.sh pytest
  AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=40 AB_ENVS="FLASHTILE_GLUON_BWD_ROWS=1" AB_CMD="$AB --seqlens 1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=230 AB_TIMEOUT=40 AB_ENVS="FLASHTILE_GLUON_BWD_ROWS=1" AB_CMD="$AB --seqlens 512,2k,8k" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -E "passed|failed|FAILED|Error" $O/g1.log | head -20; grep -v "^│" $O/g1.log | tail -14; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -14
