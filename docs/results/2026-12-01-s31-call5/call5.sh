# session 31, call 5: one loop at d=128 where the tile-level forward and dQ kernels really run
# by default (calls 1-2's d=128 fwd+bwd took the Gluon forward and the one-pass rows backward:
# their A/B measured noise). feature_bench's d=128 window (256, 0) at 16k and causal varlen
# (16k packed tokens) forward+backward, FLASHTILE_ONE_LOOP=0 (main: d <= 64 only) against =1,
# alternating, two rounds; then each item's ms per variant and round
export PYTHONPATH=$PWD/src; O=$OUT
for r in 1 2; do for v in 0 1; do
  echo "--- round $r: FLASHTILE_ONE_LOOP=$v"
  FLASHTILE_ONE_LOOP=$v timeout 95 python3 scripts/feature_bench.py --part fusion,varlen \
    --only "window,varlen causal" --budget-s 85 --out $O/r$r-$v > $O/r$r-$v.log 2>&1
  tail -3 $O/r$r-$v.log
done; done
python3 - "$O" <<'PY'
import json, sys, glob, os
rows = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/r*-*/feature-*.json")):
    run = os.path.basename(os.path.dirname(path))
    for m in json.load(open(path))["measurements"]:
        if m["provider"] == "flashtile" and m["ms"]:
            rows.setdefault(m["item"], {})[run] = (m["ms"], (m.get("check") or {}).get("worst_ratio"))
for item, runs in rows.items():
    two = [runs.get(f"r{r}-0", (None,))[0] for r in (1, 2)]
    one = [runs.get(f"r{r}-1", (None,))[0] for r in (1, 2)]
    ok = [x for x in two + one if x] and all(two + one)
    print(f"| {item} | " + " / ".join(f"{x:.3f}" if x else "-" for x in two) + " | "
          + " / ".join(f"{x:.3f}" if x else "-" for x in one) + " | "
          + (f"{sum(one) / sum(two):.3f}" if ok else "-") + " |", runs)
PY
