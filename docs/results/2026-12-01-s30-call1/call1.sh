# session 30, call 1: where the short fwd+bwd points' call time exceeds their kernel sum
# (d=128 causal 1k: 0.879 ms call, 0.741 ms kernels in session 29; cuDNN 0.706 / 0.701)
export PYTHONPATH=$PWD/src; O=$OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 400 python3 scripts/idle_probe.py --out $O/p \
  --points "128:1024:1 128:512:1 64:512:1 64:1024:1 128:512:0 128:2048:1" 2>&1 | grep -v Warning
cd $O && tar czf p.tgz p && rm -rf p
