# Session 53, call 5 (the device time's last ~150 s): the claimed items now the causal default
# from 1k keys, and the preprocess's count store moved to its end (in fp16, offline, the store
# at its start changed ptxas' schedule: 1,192 instructions against 1,040, loads interleaved
# with the arithmetic; calls 3-4 timed that preprocess at 158-163 us against 94-98).
# One run, both dtypes, d=128 causal 512 (one program per item) and 2k (claimed).
#   export OUT; bash docs/results/2026-12-07-s53-call5/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 128 \
  --dtype bf16 fp16 --seqlens 512,2k --causal yes --kernel-times --out $OUT/bench > $OUT/bench.log 2>&1
python3 - <<'PY'
import glob, json, os
for f in glob.glob(os.environ["OUT"] + "/bench/*.json"):
    for r in json.load(open(f))["results"]:
        split = {k[:24]: round(v * 1000, 1) for k, v in (r["kernel_split_rounds"] or [{}])[0].items()}
        print(r["dtype"], r["s"], r["configs"].get("dkdv"), split)
PY
echo "elapsed $((SECONDS - T0)) s"
