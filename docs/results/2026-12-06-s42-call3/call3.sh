# Session 42, call 3: d=64's causal forward in chunks of 1 up to 16 tiles (2k keys; windows of
# 33 pairs by `auto`), fwd_hopper.SINGLE_UPTO[64] 8 -> 16. tests/test_fwd_hopper.py on the GPU
# (8 processes), then the d=64 causal 2k forward and forward+backward, both dtypes, the new
# default against the old (FLASHTILE_GLUON_FWD_GROUP=8).
export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_fwd_hopper.py > $O/tests.log 2>&1
echo "tests rc $?"; tail -4 $O/tests.log
for v in "new:X=0" "old:FLASHTILE_GLUON_FWD_GROUP=8"; do
  if (( SECONDS - T0 > 400 )); then echo "skip $v (time)"; continue; fi
  env ${v#*:} timeout 90 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
    --no-plot --mode fwd,fwdbwd --causal yes --headdims 64 --seqlens 2k --dtype bf16,fp16 \
    --out $O/b-${v%%:*} > $O/b-${v%%:*}.log 2>&1
  python3 scripts/grid_table.py --lines $O/b-${v%%:*}/bench-*.json | sed "s/^/${v%%:*} /"
done
echo "elapsed $((SECONDS - T0)) s"
cd $O && tar czf runs.tgz b-* && rm -rf b-*
