# SUPERSEDED in session 57: folded into docs/results/2026-12-07-s57-next/call.sh, the one to run;
# kept as the record of what this session planned.
# Prepared in session 56 (no device was lent) for the next session's second device call
# (~480 s; the first is docs/results/2026-12-07-s55-next/call.sh, still unrun).
# FlashAttention-3's d=64 shape with the first consumer loading the ring (no loader
# warpgroup, 168 registers for each of three consumers; session 55's build with the loader
# spilled 61 of 514 instructions a trip at 160 and ran 1.62-1.83x main's time). Applies
# docs/experiments/fwd-three-consumers-fed-s56.patch to the device's copy, then:
# 1. GPU tests of three consumers (fed from 2 tiles an item, the loader with =0 or 1 tile),
#    -n 6;
# 2. A/B forward, bf16, kernel sums, 2 rounds, d=64 512/2k/4k/16k, both masks: main against
#    FLASHTILE_GLUON_FWD_CONSUMERS=3 (fed). Prediction: unmasked level to 5% faster from 2k
#    (FA3's reason for the shape: two consumers' products under each softmax); causal level
#    to 3% slower (its loops spill 11-16 instructions a trip); 512 slower either way (items
#    of 192 rows, 3 per head there, the last ragged).
#   export OUT; bash docs/results/2026-12-07-s56-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
git apply docs/experiments/fwd-three-consumers-fed-s56.patch || { echo "patch failed"; exit 1; }
timeout -s INT 200 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_fwd_hopper.py -k "three_consumers" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR|Timeout" $OUT/tests.log | head
source scripts/ab_bench.sh
AB_TIMEOUT=60 AB_COMPILE_S=40
ab_bench fed $(( 470 - (SECONDS - T0) )) "FLASHTILE_GLUON_FWD_CONSUMERS=3" \
  "--mode fwd --headdims 64 --seqlens 512,2k,4k,16k --causal both"
echo "elapsed $((SECONDS - T0)) s"
