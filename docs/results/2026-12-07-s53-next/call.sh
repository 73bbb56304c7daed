# Prepared in session 53 for the next session's first device call (~330 s; session 53's device
# time ran out before it). The claimed items are the rows kernel's causal default from 1k keys
# at d=128 (bwdrows_hopper.dynamic), and the preprocess zeroes their count at its end: at its
# start, in fp16 only, ptxas scheduled the preprocess differently (1,192 instructions against
# 1,040 offline) and calls 3-4 timed it at 158-163 us against 94-98. Neither the moved store
# nor the default has run on a GPU; nor has the transposed kernel's opt-in claimed grid
# (bwd_hopper.claims, d=64's causal one pass from 2k keys, d=96).
# 1. GPU tests: both dK/dV kernels' claimed tests, the rows kernel's file (the default's
#    claimed grid in test_rows_layout's causal GQA case), the preprocess test; -n 6;
# 2. A/B, d=128 causal 512/2k/16k, bf16 and fp16: FLASHTILE_GLUON_BWD_DYNAMIC=0 (one program
#    per item) against the default; the fp16 preprocess should be ~96 us in both;
# 3. A/B, d=64 causal 2k/4k/16k bf16: FLASHTILE_GLUON_BWD_DYNAMIC=1 (the transposed kernel's
#    claimed grid) against the default (one program per item).
#   export OUT; CALL_S=330 bash docs/results/2026-12-07-s53-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 150 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py tests/test_kernels.py \
  -k "test_rows or claimed or preprocess" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
mkdir -p $OUT/d128 $OUT/d64
left=$(( (${CALL_S:-330} - (SECONDS - T0)) * 3 / 5 ))
(OUT=$OUT/d128 AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=40 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --dtype bf16 fp16 --seqlens 512,2k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
left=$(( ${CALL_S:-330} - (SECONDS - T0) - 5 ))
(OUT=$OUT/d64 AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=30 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 64 --seqlens 2k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
for x in d128 d64; do    # (the sums, then each kernel alone: ab_table.py --split)
  grep -A8 "^flashtile, µs" $OUT/$x/ab.log
  grep -A9 "^per kernel" $OUT/$x/ab.log
done
echo "elapsed $((SECONDS - T0)) s"
