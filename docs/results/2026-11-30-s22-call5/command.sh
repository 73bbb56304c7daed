R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export OUT PYTHONPATH=$PWD/src
bash scripts/gpu_session.sh env > $OUT/env.log 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site FLASHTILE_TEST_GPUS=2
FLASHTILE_AUTOTUNE=0 timeout 380 python3 -m pytest tests -v -rfE -n 32 -p no:cacheprovider --durations=8 > $OUT/alltests.log 2>&1
echo "rc=$?"
grep -c " PASSED " $OUT/alltests.log; grep -c " SKIPPED " $OUT/alltests.log; grep -E " FAILED | ERROR " $OUT/alltests.log | head -20
tail -25 $OUT/alltests.log | cut -c1-300
