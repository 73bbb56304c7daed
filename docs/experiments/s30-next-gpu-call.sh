# Prepared in session 30 (no device after its first call) for the next session's first call:
# the two opt-in switches of the tile-level forward and dQ kernels on the GPU. First their tests (bf16 and fp16
# against float64, the d=64 causal 512 and d=128 causal 1000 cases included), then kernel sums
# against main where that kernel runs by default (d=64 causal 512 / 1k; its backward's dQ at
# 512 too), forward and forward+backward, two alternating rounds.
# Copy to docs/results/<date>-sNN-call1/call1.sh, commit, then: run `bash <that path>`.
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=150 PYTEST_ARGS="tests/test_kernels.py" \
  PYTEST_K="one_loop or chunk" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -5 $O/t.log
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=400 AB_TIMEOUT=60 AB_COMPILE_S=60 \
  AB_ENVS="FLASHTILE_ONE_LOOP=1;FLASHTILE_CAUSAL_CHUNK=64;FLASHTILE_ONE_LOOP=1 FLASHTILE_CAUSAL_CHUNK=64" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 512,1k" \
  bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -32 $O/a.log
