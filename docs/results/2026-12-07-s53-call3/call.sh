# Session 53, call 3: FLASHTILE_GLUON_BWD_DYNAMIC=1 where call 2 did not look (rows kernel
# alone there: causal 512 +4.2%, 1k -3.5%, 2k -3.2%, 4k -1.9%, 8k +1.0%, 16k -3.2%):
# a. GQA 8:1 d=128 causal (per query head), bf16, 1k/4k/16k; b. MHA d=128 causal fp16,
# 1k/2k/8k/16k. Two rounds each, fwd+bwd kernel sums.
#   export OUT; CALL_S=240 bash docs/results/2026-12-07-s53-call3/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $OUT/gqa $OUT/fp16
(OUT=$OUT/gqa AB_BUDGET=$(( ${CALL_S:-240} / 2 )) AB_ROUNDS=2 AB_TIMEOUT=30 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -A6 "^flashtile, µs" $OUT/gqa/ab.log
left=$(( ${CALL_S:-240} - (SECONDS - T0) - 5 ))
(OUT=$OUT/fp16 AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=30 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 --dtype fp16 --seqlens 1k,2k,8k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -A7 "^flashtile, µs" $OUT/fp16/ab.log
echo "elapsed $((SECONDS - T0)) s"
