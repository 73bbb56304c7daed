# Session 42, call 2. Call 1 read the d=64 causal forward at 2k keys 5-7% faster in chunks of
# 1 within windows of 33 pairs (g1) than in the default chunks of 8. Here: that again, in
# both dtypes, and the same question at d=64 4k and d=128 2k, where `auto` finds no window
# under 24 MB (33 pairs x 1 MB = 33 MB; the H100's L2 is 50 MB) so WINDOW=33 is forced.
# Then session 41's call C: d=64 unmasked forward+backward 16k, one pass (default) against
# two, 5 rounds, each round's kernels by name. Guard: no run starts past 500 s.
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # $1 name, $2 variables, $3.. bench arguments
  local name=$1 vars=$2; shift 2
  if (( SECONDS - T0 > 500 )); then echo "skip $name (time)"; return; fi
  env $vars timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
    --no-plot --out $O/$name "$@" > $O/$name.log 2>&1
  python3 scripts/grid_table.py --lines "${SPLIT[@]}" $O/$name/bench-*.json | sed "s/^/$name /"
}
SPLIT=()
for r in 1 2; do
  for v in "def:X=0" "g1w33:FLASHTILE_GLUON_FWD_GROUP=1 FLASHTILE_GLUON_FWD_WINDOW=33"; do
    run d64-${v%%:*}-r$r "${v#*:}" --mode fwd --causal yes --headdims 64 --seqlens 2k,4k --dtype bf16
    run d64h-${v%%:*}-r$r "${v#*:}" --mode fwd --causal yes --headdims 64 --seqlens 2k --dtype fp16
  done
  for v in "def:X=0" "w33:FLASHTILE_GLUON_FWD_WINDOW=33" \
           "g1w33:FLASHTILE_GLUON_FWD_GROUP=1 FLASHTILE_GLUON_FWD_WINDOW=33"; do
    run d128-${v%%:*}-r$r "${v#*:}" --mode fwd --causal yes --headdims 128 --seqlens 2k --dtype bf16
  done
done
SPLIT=(--split)
for v in "one:X=0" "two:FLASHTILE_BWD_DQ=two-pass"; do
  run split-${v%%:*} "${v#*:}" --mode fwdbwd --causal no --headdims 64 --seqlens 16k --rounds 5 --dtype bf16
done
echo "elapsed $((SECONDS - T0)) s"
cd $O && tar czf runs.tgz d64-* d64h-* d128-* split-* 2>/dev/null; rm -rf d64-* d64h-* d128-* split-*
