# Session 41, call 2: the new defaults (the Gluon forward's causal order in windows of heads,
# d=256 in chunks of 8) under the forward and backward GPU test files (the window, group and
# serial-order tests among them), then the forward's causal points against cuDNN with no
# variables set (bf16, 2 rounds, kernel sums): the defaults in effect.
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
TESTS_TIMEOUT=390 TEST_PROCS=8 PYTEST_ARGS="tests/test_fwd_hopper.py tests/test_bwd_hopper.py" \
  bash scripts/gpu_session.sh pytest
echo "tests done at $((SECONDS - T0)) s"
timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times --no-plot \
  --causal yes --mode fwd --headdims 128,96,256 --seqlens 512,1k --rounds 2 --out $O/fwd \
  > $O/fwd.log 2>&1
python3 - $O/fwd/bench-*.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
cudnn = {(r["d"], r["s"]): r for r in rows if r["provider"] == "sdpa-cudnn"}
for f in (r for r in rows if r["provider"] == "flashtile"):
    c = cudnn[(f["d"], f["s"])]
    print(f"d={f['d']:<3} s={f['s']:<5} flashtile {f['kernel_ms']*1e3:7.1f} us  cuDNN "
          f"{c['kernel_ms']*1e3:7.1f} us  kernels {c['kernel_ms']/f['kernel_ms']:.3f}  call "
          f"{f['vs_cudnn']:.3f}  {f['configs']}  check {f['check']['status']}")
PY
echo "elapsed $((SECONDS - T0)) s"
