# Prepared in session 53 for the next session's first device call (~300 s; session 53's device
# time ran out before it). The claimed items are the causal default from 1k keys at d=128
# (bwdrows_hopper.dynamic), and the preprocess zeroes their count at its end: at its start,
# in fp16 only, ptxas scheduled the preprocess differently (1,192 instructions against 1,040
# offline) and calls 3-4 timed it at 158-163 us against 94-98. Neither the moved store nor the
# default has run on a GPU.
# 1. GPU tests: the rows kernel's file (the default's claimed grid in test_rows_layout's causal
#    GQA case, the claimed tests, the plan replay) and the preprocess test, -n 6;
# 2. same-run A/B, FLASHTILE_GLUON_BWD_DYNAMIC=0 (one program per item) against the default,
#    d=128 causal 512/2k/16k, bf16 and fp16: the preprocess in fp16 should be ~96 us in both;
# 3. if time is left, the prepared stall samples (docs/results/2026-12-07-s52-next/call.sh).
#   export OUT; CALL_S=300 bash docs/results/2026-12-07-s53-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 150 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_kernels.py -k "rows or claimed or preprocess" \
  > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
left=$(( ${CALL_S:-300} - (SECONDS - T0) - 5 ))
AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=40 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --dtype bf16 fp16 --seqlens 512,2k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A8 "^flashtile, µs" $OUT/ab.log
rm -rf /tmp/abx && mkdir /tmp/abx && tar xzf $OUT/ab.tgz -C /tmp/abx
for k in preprocess rows; do python3 scripts/ab_table.py /tmp/abx/ab --kernel $k; done
echo "elapsed $((SECONDS - T0)) s"
