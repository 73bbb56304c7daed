# SUPERSEDED in session 57: folded into docs/results/2026-12-07-s57-next/call.sh, the one to run;
# kept as the record of what this session planned.
# Prepared in session 55 for the next session's first device call (~450 s).
# FLASHTILE_GLUON_FWD_HALF_DIAG=1 (opt-in, never run on a GPU): the first consumer computes each
# causal item's diagonal tile over its first 64 keys only (compiled clean offline at d=64,
# 16 B of item-level spills at d=128; default builds' SASS byte-identical).
# 1. GPU tests of it, -n 6;
# 2. A/B forward, bf16, kernel sums, 2 rounds: d=64 causal 2k/4k/16k and d=128 causal 1k/4k
#    against main (prediction: -3% / -1.5% / -0.4% at d=64 2k / 4k / 16k, -3% at d=128 1k);
# 3. A/B forward at d=64 causal 512/1k, where the tile-level forward runs by default: main
#    against the Gluon forward (FLASHTILE_GLUON_FWD=1) with and without the half diagonal
#    (session 42: the Gluon one 1.14-1.30x / 1.02-1.08x the tile-level's time there).
#   export OUT; bash docs/results/2026-12-07-s55-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 120 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_fwd_hopper.py -k "half_diagonal or test_next_s0" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
source scripts/ab_bench.sh
ab_bench d64 150 "FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 64 --seqlens 2k,4k,16k --causal yes"
ab_bench d128 100 "FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 128 --seqlens 1k,4k --causal yes"
ab_bench short $(( 440 - (SECONDS - T0) )) "FLASHTILE_GLUON_FWD=1;FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_HALF_DIAG=1" \
  "--mode fwd --headdims 64 --seqlens 512,1k --causal yes"
echo "elapsed $((SECONDS - T0)) s"
