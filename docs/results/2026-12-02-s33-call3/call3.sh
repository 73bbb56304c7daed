# Session 33 call 3 (about 400 s): call 2's A/B again, which its limits cut off (a GQA run
# outlasted 50 s): d=128 GQA 8:1 causal fwd+bwd kernel sums at 512/1k (where the skip is on by
# default), main (skip) against FLASHTILE_GLUON_BWD_SKIP_MASKED=0. Prediction as in call 2.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=480 AB_TIMEOUT=110 AB_COMPILE_S=60 AB_ENVS="FLASHTILE_GLUON_BWD_SKIP_MASKED=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 128 --gqa 8 --causal yes --seqlens 512,1k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -8 $O/b.log
