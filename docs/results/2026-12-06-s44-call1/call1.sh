# Session 44, call 1 (prepared in session 43 as call R of docs/experiments/s43-next-gpu-calls.sh).
# The one pass's rotated unmasked items (FLASHTILE_GLUON_BWD_ROTATE=1, offline-only until now):
# GPU tests against float64 first, then backward kernel sums against the default, unmasked
# d=64/128 at 1k/4k/16k, two alternating rounds after a warm-up. Prediction: -3% to -10% at
# 16k, -1% to -3% at 4k, level at 1k if the dQ reductions' contention is the cause; level
# everywhere if it is the card's clock.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_bwd_hopper.py \
  -k "rotat" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=70 AB_COMPILE_S=30 \
AB_CMD="python3 -m flashtile bench --providers flashtile --kernel-times --no-plot \
  --mode bwd --causal no --headdims 64,128 --seqlens 1k,4k,16k --dtype bf16" \
AB_ENVS="FLASHTILE_GLUON_BWD_ROTATE=1" bash scripts/gpu_session.sh ab
