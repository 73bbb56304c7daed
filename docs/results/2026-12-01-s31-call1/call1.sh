# session 31, call 1 (prepared in session 30 as docs/experiments/s30-next-gpu-call.sh): GPU tests of
# FLASHTILE_ONE_LOOP / FLASHTILE_CAUSAL_CHUNK, then A/B against main at d=64 causal 512/1k, fwd and fwd+bwd
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_kernels.py" \
  PYTEST_K="one_loop or chunk" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -5 $O/t.log
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=400 AB_TIMEOUT=60 AB_COMPILE_S=60 \
  AB_ENVS="FLASHTILE_ONE_LOOP=1;FLASHTILE_CAUSAL_CHUNK=64;FLASHTILE_ONE_LOOP=1 FLASHTILE_CAUSAL_CHUNK=64" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 512,1k" \
  bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -32 $O/a.log
