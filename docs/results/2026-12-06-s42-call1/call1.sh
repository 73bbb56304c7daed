# Session 42, call 1: session 41's prepared call A (docs/experiments/s41-next-gpu-calls.sh).
# d=64 causal forward 512/1k/2k: tile-level (default up to 1k) vs the Gluon forward with the
# causal windows (gwin), chunks of 1 in windows (g1), no windows (gnone); forward+backward d=64
# causal 512/1k with the one-pass backward (FLASHTILE_BWD_DQ=atomic); d=128 causal 512 narrow
# vs wide tiles. Kernel sums, cuDNN in every run, two alternating rounds; a guard stops
# starting runs past 520 s.
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # $1 name, $2 variables, $3.. bench arguments
  local name=$1 vars=$2; shift 2
  if (( SECONDS - T0 > 520 )); then echo "skip $name (time)"; return; fi
  env $vars timeout 110 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
    --no-plot --causal yes --out $O/$name "$@" > $O/$name.log 2>&1
  python3 scripts/grid_table.py --lines $O/$name/bench-*.json | sed "s/^/$name /"
}
for r in 1 2; do
  for v in "tile:X=0" "gwin:FLASHTILE_GLUON_FWD=1" \
           "g1:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_GROUP=1" \
           "gnone:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_WINDOW=0"; do
    run fwd-${v%%:*}-r$r "${v#*:}" --mode fwd --seqlens 512,1k,2k --dtype bf16 --headdims 64
  done
  for v in "tile:X=0" "gwin:FLASHTILE_GLUON_FWD=1" "one:FLASHTILE_BWD_DQ=atomic" \
           "gwinone:FLASHTILE_GLUON_FWD=1 FLASHTILE_BWD_DQ=atomic"; do
    run bwd-${v%%:*}-r$r "${v#*:}" --mode fwdbwd --seqlens 512,1k --dtype bf16 --headdims 64
  done
  for v in "narrow:X=0" "wide:FLASHTILE_GLUON_FWD_CONFIG=64,128,2,240"; do
    run n128-${v%%:*}-r$r "${v#*:}" --mode fwd --seqlens 512 --dtype bf16 --headdims 128
  done
done
echo "elapsed $((SECONDS - T0)) s"
cd $O && tar czf runs.tgz fwd-* bwd-* n128-* *.log 2>/dev/null; rm -rf fwd-* bwd-* n128-*
