# Session 55 call 1 (~560 s): session 54's prepared work plus the three-consumer forward.
# 1. GPU tests, -n 6: FLASHTILE_GLUON_BWD_CLAIM_MID (never run on a GPU), the claimed grids,
#    and FLASHTILE_GLUON_FWD_CONSUMERS=3 (FlashAttention-3's 192 x 128 shape at d=64, ported
#    this session onto main; offline its second and third consumers spill 61 instructions a
#    tile trip at 160 registers);
# 2. A/B d=64 causal 2k/4k fwd+bwd bf16: main (one program per item) against the claimed grid,
#    the claim mid, and the fixed turn (FLASHTILE_GLUON_BWD_PERSISTENT=1);
# 3. A/B d=64 forward 2k/4k/16k both masks bf16: FLASHTILE_GLUON_FWD_CONSUMERS=3 against main;
# 4. A/B d=128 causal 2k/16k fwd+bwd bf16: claim mid against main (the rows kernel claims by
#    default there).
#   export OUT; bash docs/results/2026-12-07-s55-call1/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 150 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py tests/test_fwd_hopper.py \
  -k "claimed_mid or claim_mid or test_claimed_grid or test_rows_claimed_grid or three_consumers" \
  > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
ab() {  # ab NAME BUDGET ENVS BENCH-ARGS
  mkdir -p $OUT/$1
  (OUT=$OUT/$1 AB_BUDGET=$2 AB_ROUNDS=2 AB_TIMEOUT=40 AB_COMPILE_S=30 AB_ENVS="$3" \
    AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --kernel-times $4" \
    bash scripts/gpu_session.sh ab > /dev/null 2>&1)
  grep -v "^[│-]" $OUT/$1/ab.log | head -30; echo "($1 done at $((SECONDS - T0)) s)"
}
ab d64 170 "FLASHTILE_GLUON_BWD_DYNAMIC=1;FLASHTILE_GLUON_BWD_DYNAMIC=1 FLASHTILE_GLUON_BWD_CLAIM_MID=1;FLASHTILE_GLUON_BWD_PERSISTENT=1" \
  "--mode fwdbwd --headdims 64 --seqlens 2k,4k --causal yes"
ab fwd3 $(( 470 - (SECONDS - T0) )) "FLASHTILE_GLUON_FWD_CONSUMERS=3" \
  "--mode fwd --headdims 64 --seqlens 2k,4k,16k --causal both"
left=$(( 560 - (SECONDS - T0) ))
[ $left -gt 40 ] && ab d128 $left "FLASHTILE_GLUON_BWD_CLAIM_MID=1" \
  "--mode fwdbwd --headdims 128 --seqlens 2k,16k --causal yes"
echo "elapsed $((SECONDS - T0)) s"
