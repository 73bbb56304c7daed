# Session 39, call 2: the serial order at 128 queries per tile (d=64) on the H200, more
# lengths. Call 1 (H100, kernel sums of fwd+bwd, 2 rounds, against main): one pass at 128
# queries (264 B of spills unmasked, 408 B causal) 0.986x / 0.967x unmasked 2k / 8k but
# 1.21x / 1.23x causal; two passes at 128 queries 0.98-1.01x (against two passes at 64:
# 0.94-0.99x). Here: d=64 fwd+bwd kernel sums at 1k/4k/16k, both masks, 2 rounds: main; serial
# 128 (main's pass rule); two passes + serial 128. Since call 1 the serial causal loop runs
# in two copies, the masked tiles first and the rest unmasked (MHA), so the positions of the
# mask are not held across the unmasked tiles (offline: the unmasked copy 729 instructions a
# trip against 1,299 in the masked loop); its GPU tests first.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t1; PYTEST_ARGS=tests/test_bwd_hopper.py PYTEST_K=serial TEST_PROCS=16 \
  TESTS_TIMEOUT=120 bash scripts/gpu_session.sh pytest ) > $O/t1.log 2>&1
tail -3 $O/t1.log
S128="FLASHTILE_GLUON_BWD_SERIAL=1 FLASHTILE_GLUON_BWD_CONFIG=64,128,2,240"
( OUT=$O/p; AB_ROUNDS=2 AB_BUDGET=400 AB_TIMEOUT=60 AB_COMPILE_S=40 \
  AB_ENVS="$S128;FLASHTILE_BWD_DQ=two-pass $S128" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal both --seqlens 1k,4k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
tail -9 $O/p.log
tar czf $O/tests.tgz -C $O t1 t1.log && rm -rf $O/t1 $O/t1.log
