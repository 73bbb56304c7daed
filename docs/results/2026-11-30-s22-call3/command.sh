R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
( export CUDA_VISIBLE_DEVICES=1 OUT=$O/g1; mkdir -p $OUT/ncu
  for c in "" "--causal"; do for p in flashtile sdpa-cudnn; do
    timeout 70 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --csv --page details python3 scripts/pipe_profile.py --provider $p --d 128 --seqlen 4096 $c > $OUT/ncu/$p$c.csv 2> $OUT/ncu/$p$c.err; echo "ncu $p $c rc=$?"
  done; done
  tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=230 AB_TIMEOUT=45 AB_ENVS="FLASHTILE_GLUON_FWD=1" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --headdims 64 --seqlens 512,1k,4k,16k --causal yes --kernel-times" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; cat $O/g1.log; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -12
