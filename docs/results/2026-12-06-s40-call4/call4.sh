# Session 40, call 4: the d=128 causal forward at 512 keys (0.61x cuDNN by kernels on the H100
# in call 1, 0.83x on the H200 in session 38). Its causal order runs in chunks of 1 up to 4
# query tiles per head (fwd_hopper.SINGLE_UPTO): every head's last tile, then every head's
# third..., so a head's K/V (256 KB; 128 MB for all 512 heads) has left the L2 before its next
# item reads it: K/V read 10 times per head instead of 4 (~470 MB against ~270 MB). Chunks
# of 8 (a head's four tiles neighbours) or 2 (two passes) read them 4 or 6 times.
# FLASHTILE_GLUON_FWD_GROUP = auto (1 here) / 8 / 2, two alternating rounds, with cuDNN in
# every run (same-run ratios), kernel sums.
export PYTHONPATH=$PWD/src; O=$OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2; do for g in auto 8 2; do
  FLASHTILE_GLUON_FWD_GROUP=$g timeout 100 python3 -m flashtile bench --providers flashtile,cudnn \
    --mode fwd --headdims 128 --causal yes --seqlens 512 --kernel-times --no-plot \
    --out $O/g$g-r$r > $O/g$g-r$r.log 2>&1
  python3 - "$g" "$r" $O/g$g-r$r/bench-*.json <<'PY'
import json, sys
rows = {x["provider"]: x for x in json.load(open(sys.argv[3]))["results"]}
f, c = rows["flashtile"], rows["sdpa-cudnn"]
print(f"group {sys.argv[1]:>4} round {sys.argv[2]}: flashtile {f['ms']*1e3:7.1f} us (kernels "
      f"{f['kernel_ms']*1e3:7.1f}), cuDNN {c['ms']*1e3:7.1f} (kernels {c['kernel_ms']*1e3:7.1f}), "
      f"kernel ratio {c['kernel_ms']/f['kernel_ms']:.3f}")
PY
done; done
cd $O && tar czf runs.tgz g* && rm -rf g*
