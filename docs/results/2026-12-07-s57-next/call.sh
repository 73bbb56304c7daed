# Prepared in session 57 for the next session's first call (~580 s): what session 57's one
# short call (H100, thirteen failed starts before it; docs/results/2026-12-07-s57-call1)
# left. There the half diagonal ran one round at d=64 causal: 0.977 / 0.975 / 0.997 of main's
# kernel time at 2k / 4k / 16k, never yet checked on a GPU; three consumers (fed) 1.08-1.17x
# slower causal, unmasked not reached. Applies docs/experiments/fwd-three-consumers-fed-s56.patch
# to the device's copy (offline, the HALF_DIAG builds at d=64 / d=128 causal 4k have the same
# SASS with and without it), then:
# 1. GPU tests of the half diagonal and test_next_s0, -n 6;
# 2. A/B forward, bf16, kernel sums, 2 rounds, d=64 causal 2k/4k/16k: main against
#    FLASHTILE_GLUON_FWD_HALF_DIAG=1;
# 3. the same unmasked at 512/2k/4k/16k against FLASHTILE_GLUON_FWD_CONSUMERS=3 (fed);
# 4. d=64 causal 512/1k (the tile-level forward's points): main against the Gluon forward
#    with and without the half diagonal;
# 5. d=128 causal 1k/4k against the half diagonal, if time is left.
#   export OUT; [DEADLINE=S] bash docs/results/2026-12-07-s57-next/call.sh
# (DEADLINE, default 580 s: the steps' cutoffs scale with it, for a call's limit cut short by
# the device time left)
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; D=${DEADLINE:-580}; nvidia-smi --query-gpu=name --format=csv,noheader
git apply docs/experiments/fwd-three-consumers-fed-s56.patch || { echo "patch failed"; exit 1; }
timeout -s INT $(( D * 26 / 100 )) python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_fwd_hopper.py -k "half_diagonal or test_next_s0" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR|Timeout" $OUT/tests.log | head
source scripts/ab_bench.sh
AB_TIMEOUT=50 AB_COMPILE_S=40
ab_bench causal $(( D * 55 / 100 - (SECONDS - T0) )) \
  "FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 64 --seqlens 2k,4k,16k --causal yes"
ab_bench full $(( D * 72 / 100 - (SECONDS - T0) )) "FLASHTILE_GLUON_FWD_CONSUMERS=3" \
  "--mode fwd --headdims 64 --seqlens 512,2k,4k,16k --causal no"
ab_bench short $(( D * 86 / 100 - (SECONDS - T0) )) \
  "FLASHTILE_GLUON_FWD=1;FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 64 --seqlens 512,1k --causal yes"
left=$(( D * 94 / 100 - (SECONDS - T0) ))
[ $left -gt 40 ] && ab_bench d128 $left "FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 128 --seqlens 1k,4k --causal yes"
echo "elapsed $((SECONDS - T0)) s"
