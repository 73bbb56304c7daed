# Session 35 call 2 (~540 s): call 1 found one program per item (FLASHTILE_GLUON_BWD_PERSISTENT=0)
# ahead of d=64's persistent grid at causal 2k/4k (kernel sums 0.964x / 0.978x, three rounds;
# predicted level to +2%). Before changing the rule:
# (b) the same A/B over the whole d=64 grid, causal and not, 512-16k (session 12 measured the
#     persistent grid +9% to +29% at 512, before the one pass). Prediction: causal ahead (-1%
#     to -4%) from 1k; unmasked and 512 behind.
# (f) the forward's grid, same question (FLASHTILE_GLUON_FWD_PERSISTENT=0), causal d=64 and
#     d=128 512-16k: the causal forward's snake order on a persistent grid against one program
#     per item (the hardware's balance). Prediction: level to -2% beyond 1k; behind at 512.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=80 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal both --seqlens 512,1k,2k,4k,8k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
( OUT=$O/f; AB_ROUNDS=2 AB_BUDGET=210 AB_TIMEOUT=50 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_FWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,1k,2k,4k,8k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/f.log 2>&1
tail -16 $O/b.log; tail -16 $O/f.log
