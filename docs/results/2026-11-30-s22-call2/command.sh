R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode bwd --headdims 128 --seqlens 1k,4k,16k --causal both --kernel-times"
T=FLASHTILE_BWD_DQ=two-pass
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1; mkdir -p $OUT
  for p in flashtile sdpa-cudnn; do
    timeout 100 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --csv --page details python3 scripts/pipe_profile.py --provider $p --d 128 --seqlen 4096 > $OUT/ncu-$p.csv 2> $OUT/ncu-$p.err; echo "ncu $p rc=$? lines=$(wc -l < $OUT/ncu-$p.csv)"
  done
  AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=60 AB_ENVS="FLASHTILE_GLUON_BWD_OVERLAP=0" AB_CMD="$B" bash scripts/gpu_session.sh ab ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=540 AB_TIMEOUT=60 AB_ENVS="$T;$T FLASHTILE_GLUON_BWD_OVERLAP=0;$T FLASHTILE_GLUON_BWD_OVERLAP=0 FLASHTILE_GLUON_BWD_CONFIG=64,64,4,240" AB_CMD="$B" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; grep -v "^│" $O/g1.log | tail -22; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -14
