# Prepared in session 54 for the next session's first device call (~360 s).
# The transposed dK/dV kernel's claimed grid measured 12% / 8% slower than one program per
# item at d=64 causal 2k (bf16 / fp16, session 54 call 2). Session 54 added, offline,
# FLASHTILE_GLUON_BWD_CLAIM_MID=1: each claim after its item's first (Q, dO) load instead of
# between two items' loads (Triton broadcasts the claim's atomic through shared memory, so
# the loader waits for its round trip where it stands). Never run on a GPU; the default
# builds' SASS is byte-identical to before (cmp, sm_90a).
# 1. GPU tests of it and of the claimed grids (both kernels), -n 6;
# 2. A/B at d=64 causal 2k/4k bf16 against main (one program per item): claimed, claimed mid,
#    and the fixed turn (FLASHTILE_GLUON_BWD_PERSISTENT=1, 3.6% slower in an older kernel):
#    which part of the 12% is the claims and which the double-buffered grid (offline both
#    spill ~416 B, mid 336 B, the default 212 B);
# 3. A/B at d=128 causal 2k/16k bf16: claimed mid against main (the rows kernel claims by
#    default there, between items).
#   export OUT; CALL_S=360 bash docs/results/2026-12-07-s54-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 100 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py \
  -k "claimed_mid or claim_mid or test_claimed_grid or test_rows_claimed_grid" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
mkdir -p $OUT/d64 $OUT/d128
(OUT=$OUT/d64 AB_BUDGET=$(( (${CALL_S:-360} - (SECONDS - T0)) * 3 / 5 )) AB_ROUNDS=2 AB_TIMEOUT=40 \
  AB_COMPILE_S=30 AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1;FLASHTILE_GLUON_BWD_DYNAMIC=1 FLASHTILE_GLUON_BWD_CLAIM_MID=1;FLASHTILE_GLUON_BWD_PERSISTENT=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 64 --seqlens 2k,4k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
(OUT=$OUT/d128 AB_BUDGET=$(( ${CALL_S:-360} - (SECONDS - T0) - 10 )) AB_ROUNDS=2 AB_TIMEOUT=40 \
  AB_COMPILE_S=30 AB_ENVS="FLASHTILE_GLUON_BWD_CLAIM_MID=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --seqlens 2k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
for x in d64 d128; do grep -v "^[│-]" $OUT/$x/ab.log | head -24; done
echo "elapsed $((SECONDS - T0)) s"
