# session 31, call 4: call 3's tests stopped at their limit (116 passed, none failed, of 211):
# the causal / window cases of tests/test_kernels.py (where one loop now runs by default up to
# d=64) again, then issue 7's grid at d=128 (bf16, against cuDNN in the same run)
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT; mkdir -p $O/x
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=210 PYTEST_ARGS="tests/test_kernels.py" \
  PYTEST_K="(causal or window or local) and not one_loop and not chunk" \
  bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -3 $O/t.log
B="python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times"
timeout 290 $B --headdims 128 --out $O/x/grid128 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
tar czf $O/x.tgz -C $O x && rm -rf $O/x
