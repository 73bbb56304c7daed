# Session 43, call 1 (prepared in session 42 as docs/experiments/s42-next-call-rowsum.sh).
# The Gluon forward's row sums on the tensor cores (FLASHTILE_GLUON_FWD_ROWSUM_MMA=1: P 1
# against a tile of ones, N = 8, instead of 64 FADD a thread and tile) and, on the issue slots
# that frees, one in 8 of P's exp2 by a cubic on the FMA pipes (FLASHTILE_GLUON_FWD_EXP_EMU=8).
# Offline (sm_90a, d=64 unmasked, per pair of tiles against the tensor time): issue 84% ->
# 72% (ROWSUM) -> 78% (+EMU 8); MUFU 103% -> 103% -> 85%; tensor work +6.25% (the N = 8
# products). d=64 causal: 618 -> 554 instructions a tile (two tiles a trip with ROWSUM).
# First their GPU tests against float64 (never run), then forward kernel sums, two
# alternating rounds (gpu_session.sh ab; d=64 causal from 2k: up to 1k it runs the
# tile-level forward, which neither variable touches).
# Prediction: ROWSUM alone level to -3% at d=64 (the scale-in-exponent change took 12% of
# the instructions and 1-6% of the time; here the tensor work grows), +0-2% at d=128 (not
# issue-bound); ROWSUM + EMU 8 -2% to -5% at d=64 unmasked, where the MUFU bound the tile.
# If either leads at d=64, make it the d=64 default (rowsum_mma / exp_emu by head dim), then
# tests/test_fwd_hopper.py on the GPU and issue 7's d=64 forward rows in both dtypes.
export PYTHONPATH=$PWD/src
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_fwd_hopper.py \
  -k "rowsum or exp_emu" > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -3 $OUT/tests.log
AB_ROUNDS=2 AB_BUDGET=380 AB_TIMEOUT=60 AB_COMPILE_S=30 \
AB_CMD="python3 -m flashtile bench --providers flashtile --kernel-times --no-plot --mode fwd \
  --headdims 64,128 --seqlens 2k,16k --causal both --dtype bf16" \
AB_ENVS="FLASHTILE_GLUON_FWD_ROWSUM_MMA=1;FLASHTILE_GLUON_FWD_ROWSUM_MMA=1 FLASHTILE_GLUON_FWD_EXP_EMU=8" \
  bash scripts/gpu_session.sh ab
