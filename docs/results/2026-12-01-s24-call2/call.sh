R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --causal yes --kernel-times"
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  PYTEST_ARGS="tests/test_fwd_hopper.py" bash scripts/gpu_session.sh pytest
  AB_ROUNDS=2 AB_BUDGET=260 AB_TIMEOUT=45 AB_CMD="$B --headdims 128,256 --seqlens 512,1k,4k" bash scripts/gpu_session.sh ab ) > $O/g1.log 2>&1 &
mkdir -p /tmp/h0 && cp -r src scripts tests pyproject.toml /tmp/h0/
( cd /tmp/h0; export PYTHONPATH=/tmp/h0/src CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  G="FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_CONFIG"
  AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=40 AB_ENVS="$G=64,64,4,240;$G=64,64,6,240;FLASHTILE_GLUON_FWD=1" AB_CMD="$B --headdims 64 --seqlens 512,1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -E "passed|failed|FAILED|Error" $O/g1.log | head -20; grep -v "^│" $O/g1.log | tail -12; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -12
