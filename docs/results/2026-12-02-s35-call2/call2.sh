# Session 35 call 2 (~330 s; (f) dropped for the clock, left to the next session), tree with the new rule (bwd_hopper.persistent_ahead: d=64 causal
# beyond 8 items per head, i.e. from 2k, takes one program per item; call 1: 0.964x / 0.978x
# at 2k/4k, three rounds).
# (t) test_bwd_hopper.py and test_bwdrows_hopper.py on the GPU with the new default.
# (b) the rule out of sample, d=64 causal fwd+bwd kernel sums at 512, 1k, 8k, 16k: main (new
#     rule) against FLASHTILE_GLUON_BWD_PERSISTENT=1 (the old grid beyond 1k) and =0 (one per
#     item also at 512/1k). Prediction: =1 behind by 1-3% at 8k/16k; =0 behind at 512/1k
#     (session 12: the persistent grid +9% to +29% at 512).
# (f) the forward's grid, same question (FLASHTILE_GLUON_FWD_PERSISTENT=0), causal d=64 and
#     d=128 512-16k. Prediction: level to -2% beyond 1k; behind at 512.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS="tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py" TEST_PROCS=16 \
  TESTS_TIMEOUT=150 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=230 AB_TIMEOUT=45 AB_COMPILE_S=20 \
  AB_ENVS="FLASHTILE_GLUON_BWD_PERSISTENT=1;FLASHTILE_GLUON_BWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 512,1k,8k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -4 $O/t.log; tail -7 $O/b.log
