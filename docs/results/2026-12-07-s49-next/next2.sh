# Prepared by session 49 for the next session's second call (CALL_S, default 330 s): an A/B of
# GQA 8:1 forward+backward at d=64 and d=128, 1k/4k/16k, both masks: main (d=128 causal per
# query head, the rest per KV head) against FLASHTILE_GLUON_BWD_EXPAND=1 (every point per query
# head: d=64 in the transposed kernel, unmasked d=128 in the rows kernel), cuDNN in every run,
# kernel sums, 2 rounds. Run next1.sh first (its tests cover both paths).
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
AB_BUDGET=$((${CALL_S:-330} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=80 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 64,128 --gqa 8 --seqlens 1k,4k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -30 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
