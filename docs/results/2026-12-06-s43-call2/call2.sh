# Session 43, call 2 (prepared in session 42 as docs/experiments/s42-next-call-g64.sh).
# The Gluon forward at d=64 causal 512 / 1k on 64-key tiles, now with the causal windows.
# Session 28 (H200, no windows) read 64-key tiles level with the tile-level forward at 512,
# 2-10% slower at 1k; the windows took 7-11% off the Gluon forward's 128-key tiles in session
# 42's call 1. Compiled offline first (sm_90a, d=64 causal 512, 32 heads): 64,64,4,240 and
# 64,64,6,240 both 168 registers, 0 spills, 14 waits for 48 HGMMA. Kernel sums (flashtile
# alone), two alternating rounds after a warm-up (`gpu_session.sh ab`; AB_BUDGET: no run
# starts that could end past 260 s). Prediction: 64 x 4 within 3% of the tile-level
# forward at 512 (its items' start and end halve with the tiles), behind it at 1k.
AB_ROUNDS=2 AB_BUDGET=260 AB_TIMEOUT=45 AB_COMPILE_S=30 \
AB_CMD="python3 -m flashtile bench --providers flashtile --kernel-times --no-plot --mode fwd \
  --causal yes --headdims 64 --seqlens 512,1k --dtype bf16" \
AB_ENVS="FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_CONFIG=64,64,4,240;FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_CONFIG=64,64,6,240" \
  bash scripts/gpu_session.sh ab
# Then (added in session 43): each item's first S before the previous item's epilogue
# (FLASHTILE_GLUON_FWD_NEXT_S0=1) at the short unmasked points, where items are 4-8 tiles and
# the item boundary weighs most (d=64 512: 0.90x cuDNN, d=128 512: 0.97x). Session 24 read it
# 0.3-1.7% slower unmasked at d=128 (longer items). Offline at d=64 512: 168 registers, no
# spills, none serialised. Prediction: -1% to -3% at 512, level at 1k.
AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=45 AB_COMPILE_S=30 \
AB_CMD="python3 -m flashtile bench --providers flashtile --kernel-times --no-plot --mode fwd \
  --causal no --headdims 64,128 --seqlens 512,1k --dtype bf16" \
AB_ENVS="FLASHTILE_GLUON_FWD_NEXT_S0=1" OUT=$OUT/next_s0 \
  bash scripts/gpu_session.sh ab
