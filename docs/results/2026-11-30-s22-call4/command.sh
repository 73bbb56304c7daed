R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  TEST_PROCS=8 TESTS_TIMEOUT=120 PYTEST_ARGS="tests/test_bwdrows_hopper.py" PYTEST_K="" bash scripts/gpu_session.sh pytest
  mkdir -p $OUT/x
  FLASHTILE_GLUON_BWD_ROWS=1 timeout 70 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --csv --page details python3 scripts/pipe_profile.py --provider flashtile --d 128 --seqlen 4096 > $OUT/x/ncu-rows.csv 2> $OUT/x/ncu-rows.err; echo "ncu rc=$?"
  FLASHTILE_GLUON_BWD_ROWS=1 timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --seqlens 1k,4k,16k --causal both --kernel-times --out $OUT/x/fb 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=60 AB_ENVS="FLASHTILE_GLUON_BWD_ROWS=1" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode bwd --headdims 128 --seqlens 1k,4k,16k --causal both --kernel-times" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "PytestBenchmark\|warner" $O/g1.log | tail -30; echo "#### GPU0"; tail -32 $O/g0.log
