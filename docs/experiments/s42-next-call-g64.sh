# Prepared in session 42 (not run: its device time was spent). Copy to
# docs/results/<date>-sNN-callK/, commit, run `export OUT; bash <path>` (~150 s + the start).
# The Gluon forward at d=64 causal 512 / 1k on 64-key tiles, now with the causal windows.
# Session 28 (H200, no windows) read 64-key tiles level with the tile-level forward at 512,
# 2-10% slower at 1k; the windows took 7-11% off the Gluon forward's 128-key tiles in session
# 42's call 1. Compiled offline first (sm_90a, d=64 causal 512, 32 heads): 64,64,4,240 and
# 64,64,6,240 both 168 registers, 0 spills, 14 waits for 48 HGMMA. Kernel sums, cuDNN in
# every run, two rounds, a guard at 140 s. Prediction: 64 x 4 within 3% of the tile-level
# forward at 512 (its items' start and end halve with the tiles), behind it at 1k.
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2; do
  for v in "tile:X=0" "g64x4:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_CONFIG=64,64,4,240" \
           "g64x6:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_CONFIG=64,64,6,240"; do
    n=${v%%:*}-r$r
    if (( SECONDS - T0 > 140 )); then echo "skip $n (time)"; continue; fi
    env ${v#*:} timeout 60 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
      --no-plot --mode fwd --causal yes --headdims 64 --seqlens 512,1k --dtype bf16 \
      --out $O/$n > $O/$n.log 2>&1
    python3 scripts/grid_table.py --lines $O/$n/bench-*.json | sed "s/^/$n /"
  done
done
echo "elapsed $((SECONDS - T0)) s"
cd $O && tar czf runs.tgz tile-* g64* && rm -rf tile-* g64*
