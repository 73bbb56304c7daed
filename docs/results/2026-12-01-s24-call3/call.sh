R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
NCU="ncu --profile-from-start off --clock-control none --section SpeedOfLight --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct --csv --page details"
( export CUDA_VISIBLE_DEVICES=1 FLASHTILE_TEST_GPUS=1 OUT=$O/g1; mkdir -p $OUT/x
  for s in 512 1024; do
    timeout 60 $NCU python3 scripts/pipe_profile.py --mode fwd --provider flashtile --d 128 --seqlen $s --causal > $OUT/x/ft-$s.csv 2> $OUT/x/ft-$s.err
    FLASHTILE_GLUON_FWD_GROUP=4 timeout 60 $NCU python3 scripts/pipe_profile.py --mode fwd --provider flashtile --d 128 --seqlen $s --causal > $OUT/x/ft-g4-$s.csv 2> $OUT/x/ft-g4-$s.err
    timeout 60 $NCU python3 scripts/pipe_profile.py --mode fwd --provider sdpa-cudnn --d 128 --seqlen $s --causal > $OUT/x/cudnn-$s.csv 2> $OUT/x/cudnn-$s.err
  done
  python3 $R/.branches/ncusum.py $OUT/x/*.csv
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x ) > $O/g1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=0 FLASHTILE_TEST_GPUS=1 OUT=$O/g0
  AB_ROUNDS=2 AB_BUDGET=300 AB_TIMEOUT=35 AB_ENVS="FLASHTILE_GLUON_FWD_GROUP=2;FLASHTILE_GLUON_FWD_GROUP=4;FLASHTILE_GLUON_FWD_GROUP=8" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --causal yes --kernel-times --headdims 128 --seqlens 512,1k,2k" bash scripts/gpu_session.sh ab ) > $O/g0.log 2>&1
wait
echo "#### GPU1"; tail -30 $O/g1.log | cut -c1-400; echo "#### GPU0"; grep -v "^│" $O/g0.log | tail -9
