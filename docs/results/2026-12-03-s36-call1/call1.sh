# Session 36 call 1 (~480 s).
# (w) The persistent grid's last round: 16k tokens (b=4, 4k) unmasked, d=64/128, fwd and fwd+bwd,
#     kernel sums, --nheads 32 (4,096 work items of 128 rows = 31 x 132 + 4: the last round
#     nearly empty) against 33 (4,224 = 32 x 132: full), alternating, 2 rounds, cuDNN beside.
#     Prediction (list model, equal items): flashtile's TFLOP/s at 33 heads 3.1% above 32's;
#     if level, the last round costs nothing and the tail is not worth splitting.
# (f) The forward's grid (FLASHTILE_GLUON_FWD_PERSISTENT=0), causal d=64/128 512-16k, 2 rounds
#     (session 35's prepared, unrun step). Prediction: level to -2% beyond 1k; behind at 512.
export PYTHONPATH=$PWD/src; O=$OUT
bench() { timeout ${2:-120} python3 -m flashtile bench --providers flashtile,cudnn --no-plot \
  --kernel-times --causal no --mode fwd,fwdbwd --headdims 64,128 --seqlens 4k --batch 4 \
  --nheads $1 --out "$3" 2>&1 | grep -E "^│ +[0-9]|WRONG"; }
( echo "--- warm-up"; bench 32 150 /tmp/warm > /dev/null
  for r in 1 2; do for h in 32 33; do echo "--- round $r, $h heads"; bench $h 90 $O/w/$r-h$h; done; done
  python3 scripts/rate_table.py $O/w ) > $O/w.log 2>&1
( OUT=$O/f; AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=45 AB_COMPILE_S=20 \
  AB_ENVS="FLASHTILE_GLUON_FWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,1k,2k,4k,8k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/f.log 2>&1
tar czf $O/w.tgz -C $O w && rm -rf $O/w
tail -12 $O/w.log; tail -15 $O/f.log
