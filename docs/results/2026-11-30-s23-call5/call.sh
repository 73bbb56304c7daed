R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export OUT PYTHONPATH=$PWD/src
bash scripts/gpu_session.sh env > $OUT/env.log 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site FLASHTILE_TEST_GPUS=2
FLASHTILE_AUTOTUNE=0 timeout 380 python3 -m pytest tests -v -rfE -n 32 -p no:cacheprovider --durations=8 > $OUT/alltests.log 2>&1
echo "rc=$?"
grep -c " PASSED " $OUT/alltests.log; grep -c " SKIPPED " $OUT/alltests.log; grep -E " FAILED | ERROR " $OUT/alltests.log | head -20
tail -4 $OUT/alltests.log | cut -c1-300
mkdir -p $OUT/x; timeout 130 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --seqlens 512,1k,2k,4k,8k,16k --causal both --kernel-times --out $OUT/x/fb128 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"; tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
