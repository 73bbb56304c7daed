# Session 53, call 4: FLASHTILE_GLUON_BWD_DYNAMIC=1 once more, both dtypes in each run (call 3's
# one fp16 round of it had the preprocess at 158-163 us against 94-98, in no bf16 run of calls
# 1-2), MHA d=128 causal 1k/2k/4k/16k; then GQA 8:1 causal 1k/4k (call 3 ran out of budget
# before its variant). Two rounds each, fwd+bwd kernel sums.
#   export OUT; CALL_S=250 bash docs/results/2026-12-07-s53-call4/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $OUT/mha $OUT/gqa
(OUT=$OUT/mha AB_BUDGET=$(( ${CALL_S:-250} * 2 / 3 )) AB_ROUNDS=2 AB_TIMEOUT=45 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --dtype bf16 fp16 --seqlens 1k,2k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -A10 "^flashtile, µs" $OUT/mha/ab.log
left=$(( ${CALL_S:-250} - (SECONDS - T0) - 5 ))
(OUT=$OUT/gqa AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=20 AB_COMPILE_S=25 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -A5 "^flashtile, µs" $OUT/gqa/ab.log
echo "elapsed $((SECONDS - T0)) s"
