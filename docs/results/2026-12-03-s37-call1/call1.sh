# Prepared in session 36 (no device time was left; ~300 s): the backward's preprocess grid with
# a row block's heads as neighbouring programs (FLASHTILE_BWD_PRE_HEADS_FIRST=1, opt-in; same
# gradients bitwise, tested on the CPU under the interpreter). Its GPU tests first (d=24, 64,
# 128, dense and packed, both dQ modes, against the default order and float64), then fwd+bwd
# kernel sums against main, both head dims and masks, 2 alternating rounds. Prediction: -10 to
# -15 us a step at every length (the kernel moves 268 MB at ~3.35 TB/s at 16k tokens, d=128;
# session 22), i.e. -2% to -3% at 512, under -0.5% at 8k. If it gains, make it the default and
# drop the switch. Copy to docs/results/<date>-sNN-callK/, commit, run `export OUT; bash <path>`.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS=tests/test_kernels.py PYTEST_K=preprocess_heads_first TEST_PROCS=16 \
  TESTS_TIMEOUT=150 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
( OUT=$O/p; AB_ROUNDS=2 AB_BUDGET=260 AB_TIMEOUT=60 AB_COMPILE_S=20 \
  AB_ENVS="FLASHTILE_BWD_PRE_HEADS_FIRST=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64,128 --causal both --seqlens 512,2k,8k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
tail -4 $O/t.log; tail -14 $O/p.log
