# Session 39, call 1: the dK/dV kernel's serial order (FLASHTILE_GLUON_BWD_SERIAL=1, opt-in),
# which lets d=64 take 128 queries per tile (FlashAttention-3's 128 x 128 at d=64).
# Offline (sm_90a): two passes at 128 queries 28 B (causal) / 92 B (unmasked) of spills and
# none serialised (without the serial order: 724-1072 B and every wgmma serialised); the one
# pass 332-472 B. Default SASS unchanged. (1) Its GPU tests (test_serial_order: NaN-poisoned
# gradients against float64). (2) Kernel sums of fwd+bwd at d=64, 2k/8k, both masks, 2 rounds:
# main; two passes; two passes + serial + 128 queries; serial + 128 queries (main's pass rule).
# Prediction: the dK/dV kernel at 128 queries 5-15% faster than at 64 in two passes (half the
# tiles, N=128 products), less what the lost in-warpgroup overlap costs.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t1; PYTEST_ARGS=tests/test_bwd_hopper.py PYTEST_K=serial TEST_PROCS=16 \
  TESTS_TIMEOUT=170 bash scripts/gpu_session.sh pytest ) > $O/t1.log 2>&1
S128="FLASHTILE_GLUON_BWD_SERIAL=1 FLASHTILE_GLUON_BWD_CONFIG=64,128,2,240"
( OUT=$O/p; AB_ROUNDS=2 AB_BUDGET=350 AB_TIMEOUT=45 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_BWD_DQ=two-pass;FLASHTILE_BWD_DQ=two-pass $S128;$S128" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal both --seqlens 2k,8k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
tail -5 $O/t1.log; tail -16 $O/p.log
tar czf $O/tests.tgz -C $O t1 t1.log && rm -rf $O/t1 $O/t1.log
