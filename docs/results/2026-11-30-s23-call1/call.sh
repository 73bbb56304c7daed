R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  bash scripts/gpu_session.sh env
  mkdir -p $OUT/x
  timeout 270 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --headdims 128 --seqlens 512,1k,2k,4k,8k,16k --causal both --out $OUT/x/grid128 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  timeout 130 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal both --out $OUT/x/gqa 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  timeout 90 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --headdims 96,128 --seqlens 4k,16k --causal both --kernel-times --out $OUT/x/d96 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  TEST_PROCS=8 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py" PYTEST_K="rows or bench_rows_name" bash scripts/gpu_session.sh pytest
  AB_ROUNDS=2 AB_BUDGET=380 AB_TIMEOUT=50 AB_ENVS="FLASHTILE_GLUON_BWD_ROWS_SCHEDULE=skew;FLASHTILE_GLUON_BWD_ROWS_SCHEDULE=own-dq;FLASHTILE_GLUON_BWD_ROWS_SCHEDULE=ahead" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode bwd --headdims 128 --seqlens 1k,4k,16k --causal both --kernel-times" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "PytestBenchmark\|warner" $O/g1.log | tail -45; echo "#### GPU0"; grep -v "PytestBenchmark\|warner" $O/g0.log | tail -45
