# Session 41, call 1: session 40's prepared call A (docs/experiments/s40-next-gpu-calls.sh).
# The causal order's windows (FLASHTILE_GLUON_FWD_WINDOW, FLASHTILE_GLUON_BWD_WINDOW,
# FLASHTILE_FWD_WINDOW; opt-in) against chunks of 1 (the rule) and chunks of 8, kernel sums,
# cuDNN in every run (same-run ratios), two alternating rounds. A guard stops starting runs
# past 540 s so the call ends inside the device's 600 s limit.
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # $1 name, $2 variables, $3.. bench arguments
  local name=$1 vars=$2; shift 2
  if (( SECONDS - T0 > 540 )); then echo "skip $name (time)"; return; fi
  env $vars timeout 110 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
    --no-plot --causal yes --out $O/$name "$@" > $O/$name.log 2>&1
  python3 - "$name" $O/$name/bench-*.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[2]))["results"]
cudnn = {(r["d"], r["s"], r["mode"]): r for r in rows if r["provider"] == "sdpa-cudnn"}
for f in (r for r in rows if r["provider"] == "flashtile"):
    c = cudnn[(f["d"], f["s"], f["mode"])]
    print(f"{sys.argv[1]:<14} d={f['d']:<3} s={f['s']:<5} {f['mode']:<6} flashtile "
          f"{f['kernel_ms']*1e3:7.1f} us  cuDNN {c['kernel_ms']*1e3:7.1f} us  "
          f"ratio {c['kernel_ms']/f['kernel_ms']:.3f}  check {f['check']['status']}")
PY
}
for r in 1 2; do
  for v in "rule:FLASHTILE_GLUON_FWD_WINDOW=0" "g8:FLASHTILE_GLUON_FWD_GROUP=8" \
           "win:FLASHTILE_GLUON_FWD_WINDOW=auto"; do
    run fwd-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 128,256,96 --seqlens 512
    run fwd1k-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 128 --seqlens 1k
  done
  for v in "rule:FLASHTILE_FWD_WINDOW=0" "win:FLASHTILE_FWD_WINDOW=auto"; do
    run fwd64-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 64 --seqlens 512,1k
  done
  for v in "rule:FLASHTILE_GLUON_BWD_WINDOW=0" "g8:FLASHTILE_GLUON_BWD_GROUP=8" \
           "win:FLASHTILE_GLUON_BWD_WINDOW=auto"; do
    run bwd-${v%%:*}-r$r "${v#*:}" --mode fwdbwd --headdims 64,128 --seqlens 512,1k
  done
done
echo "elapsed $((SECONDS - T0)) s"
cd $O && tar czf runs.tgz fwd* bwd-* && rm -rf fwd* bwd-*
