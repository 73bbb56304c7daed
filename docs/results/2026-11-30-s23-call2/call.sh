R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1
  bash scripts/gpu_session.sh env
  mkdir -p $OUT/x
  timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --headdims 64 --seqlens 512,1k,2k,4k,8k,16k --causal both --kernel-times --out $OUT/x/grid64 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal both --kernel-times --out $OUT/x/gqa 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  TEST_PROCS=8 TESTS_TIMEOUT=120 PYTEST_ARGS="tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py" PYTEST_K="rows or bench_rows_name" bash scripts/gpu_session.sh pytest
  mkdir -p $OUT/x
  for c in "" --causal; do timeout 80 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --csv --page details python3 scripts/pipe_profile.py --provider flashtile --d 128 --seqlen 4096 $c > $OUT/x/ncu-rows$c.csv 2> $OUT/x/ncu-rows$c.err; echo "ncu $c rc=$?"; done
  timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --headdims 128 --seqlens 512,1k,2k,4k,8k,16k --causal both --kernel-times --out $OUT/x/grid128 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "PytestBenchmark\|warner" $O/g1.log | tail -40; echo "#### GPU0"; grep -v "PytestBenchmark\|warner" $O/g0.log | tail -40
