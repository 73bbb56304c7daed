# session 31, call 3: one loop now the default up to d=64; the tile-level kernels' GPU tests
# (bf16 and fp16 against float64) on it, then issue 7's grid at d=64 (bf16, flashtile against
# cuDNN in the same run, call times and kernel sums, with the plots; last whole grid: session 23)
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT; mkdir -p $O/x
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=170 PYTEST_ARGS="tests/test_kernels.py" \
  bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -4 $O/t.log
B="python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times"
timeout 330 $B --headdims 64 --out $O/x/grid64 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
tar czf $O/x.tgz -C $O x && rm -rf $O/x
