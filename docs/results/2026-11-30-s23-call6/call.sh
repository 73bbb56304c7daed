R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
AB="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode bwd --headdims 128 --causal yes --kernel-times"
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=35 AB_CMD="$AB --seqlens 512,2k,8k" bash scripts/gpu_session.sh ab ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=35 AB_CMD="$AB --seqlens 1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "^│" $O/g1.log | tail -12; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -12
