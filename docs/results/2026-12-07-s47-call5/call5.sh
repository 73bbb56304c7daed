# Session 47's last call, cut to ~230 s of device time left: SOLO's bf16 GPU tests, then the
# forward at 512/1k, d=64/128, both masks, main (with cuDNN) then SOLO (the Gluon forward forced,
# FLASHTILE_GLUON_FWD=1), one run each, kernel sums. (call4.sh: the fuller A/B, for later.)
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 90 python3 -m pytest -q -rf -n 12 -p no:cacheprovider tests/test_fwd_hopper.py \
  -k "solo and (bf16 or launch)" > $OUT/solo-tests.log 2>&1; echo "tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/solo-tests.log | head; tail -2 $OUT/solo-tests.log
B="python3 -m flashtile bench --no-plot --mode fwd --headdims 64,128 --seqlens 512,1k --causal both --kernel-times"
timeout -s INT 70 $B --providers flashtile,cudnn --out $OUT/main > $OUT/main.log 2>&1; echo "main rc $?"
FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_SOLO=1 timeout -s INT $((215 - (SECONDS - T0))) \
  $B --providers flashtile --out $OUT/solo > $OUT/solo.log 2>&1; echo "solo rc $?"
grep -E "WRONG|error" $OUT/solo.log | head -3
python3 - <<'PY'
import glob, json, os
rows = {}
for name in ("main", "solo"):
    for f in glob.glob(os.path.join(os.environ["OUT"], name, "bench-*.json")):
        for r in json.load(open(f))["results"]:
            key = (r["d"], "causal" if r["causal"] else "full", r["s"])
            rows.setdefault(key, {})[(name, r["provider"])] = (r.get("kernel_ms"), (r.get("configs") or {}).get("fwd"))
print("point | main flashtile us | cuDNN us | SOLO us | SOLO/main | SOLO config")
for key in sorted(rows):
    v = rows[key]
    m = v.get(("main", "flashtile"), (None, None)); c = v.get(("main", "sdpa-cudnn"), (None, None)); s = v.get(("solo", "flashtile"), (None, None))
    ratio = f"{s[0] / m[0]:.3f}" if s[0] and m[0] else "-"
    fmt = lambda x: f"{x * 1000:.1f}" if x else "-"
    print(f"{key} | {fmt(m[0])} ({m[1]}) | {fmt(c[0])} | {fmt(s[0])} | {ratio} | {s[1]}")
PY
echo "elapsed $((SECONDS - T0)) s"
