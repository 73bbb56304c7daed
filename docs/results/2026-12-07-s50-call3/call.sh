# Session 50, call 3: where GQA's causal backward per query head (FLASHTILE_GLUON_BWD_EXPAND=1)
# wins at d=64 and d=96 (call 2: d=64 causal GQA 8 0.729 / 0.698 at 4k / 16k, 1.029 at 1k):
# GQA 8 at 1k/2k/4k/16k, then GQA 4 at d=64 1k/2k/4k; forward+backward kernel sums, 2 rounds.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
ROOT=$OUT
for g in 8 4; do
  if [ $g = 8 ]; then D=64,96; S=1k,2k,4k,16k; B=$((${CALL_S:-400} * 6 / 10)); else D=64; S=1k,2k,4k; B=$((${CALL_S:-400} - (SECONDS - T0))); fi
  OUT=$ROOT/g$g AB_BUDGET=$B AB_ROUNDS=2 AB_TIMEOUT=70 AB_COMPILE_S=40 \
    AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND=1" \
    AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims $D --gqa $g --seqlens $S --causal yes --kernel-times" \
    bash scripts/gpu_session.sh ab > /dev/null 2>&1
  echo "GQA $g:"; grep -A20 "^flashtile, µs" $ROOT/g$g/ab.log
done
echo "elapsed $((SECONDS - T0)) s"
