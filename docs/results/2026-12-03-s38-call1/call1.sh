# Prepared in session 37 (no device time was left; ~520 s): one consumer partition of two
# warpgroups over an item's 128 rows in the Gluon forward with S_0 ahead
# (FLASHTILE_GLUON_FWD_ONE_CONSUMER=1, opt-in; offline: SASS 5,752 -> 3,000 instructions at
# d=128 causal on 64-key tiles, 7,424 -> 3,904 on 128-key tiles, no spills, none serialised;
# never run on a GPU). (1) Its GPU tests (test_one_consumer: 96 cases, NaN-poisoned outputs and
# gradients against float64), then the whole forward file with the switch on for every test
# that does not set it. (2) Forward kernel sums against main, causal d=64/128 at 512-16k, 2
# alternating rounds; the second variant also runs the Gluon forward at d=64 causal 512/1k,
# where main runs the tile-level one (Gluon with two consumers: 1.09x / 1.03x its time,
# session 26), and elsewhere repeats the first. Prediction:
# -2% to +3% (half the code, against the lost own-tile skip, -2% to -5% at d=128 512/1k in
# session 24, and a partition-wide barrier at each slot release); if it gains, rule by
# measured points, and the same for the backward (its tile loop is two copies too).
# Copy to docs/results/<date>-sNN-callK/, commit, run `export OUT; bash <that path>`.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t1; PYTEST_ARGS=tests/test_fwd_hopper.py PYTEST_K=one_consumer TEST_PROCS=16 \
  TESTS_TIMEOUT=120 bash scripts/gpu_session.sh pytest ) > $O/t1.log 2>&1
( OUT=$O/t2; FLASHTILE_GLUON_FWD_ONE_CONSUMER=1 PYTEST_ARGS=tests/test_fwd_hopper.py \
  TEST_PROCS=16 TESTS_TIMEOUT=130 bash scripts/gpu_session.sh pytest ) > $O/t2.log 2>&1
( OUT=$O/p; AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=40 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_FWD_ONE_CONSUMER=1;FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_ONE_CONSUMER=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,1k,2k,4k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
# (3) Whether the instruction-fetch stalls go (session 28: no_instruction 12% of the active
# samples at d=128 causal 512): the stall samples of both forwards there, one consumer first.
( OUT=$O/s; mkdir -p $OUT; FLASHTILE_GLUON_FWD_ONE_CONSUMER=1 STALL_POINTS="128:512:causal" \
  STALL_PROVIDERS=flashtile STALL_KERNEL=fwd_hopper STALL_TIMEOUT=60 \
  bash scripts/gpu_session.sh stallsrc; mv $OUT/stallsrc.tgz $OUT/one.tgz
  STALL_POINTS="128:512:causal" STALL_PROVIDERS=flashtile STALL_KERNEL=fwd_hopper \
  STALL_TIMEOUT=60 bash scripts/gpu_session.sh stallsrc ) > $O/s.log 2>&1
tail -4 $O/t1.log; tail -4 $O/t2.log; tail -14 $O/p.log; grep -E "^## |Reasons" $O/s.log
# (the device returns at most 8 files)
tar czf $O/tests.tgz -C $O t1 t2 t1.log t2.log && rm -rf $O/t1 $O/t2 $O/t1.log $O/t2.log
