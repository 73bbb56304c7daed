# Session 32, call 1 (prepared in session 31 as docs/experiments/s31-next-gpu-call.sh; about 500 s).
# 1. The d=64 causal backward now that the tile-level dQ runs in one loop: two passes
#    (FLASHTILE_BWD_DQ=two-pass: the Gluon dK/dV kernel, then the tile-level dQ) against the
#    rule's one pass (the late pass at 1k, the early one from 2k), and two passes with the
#    Gluon dQ kernel (FLASHTILE_GLUON_DQ=1, opt-in at d=64 since session 10), kernel sums.
#    Session 16 had the late pass at 742 us against 747 for two passes at 1k, before one loop.
# 2. The d=64 unmasked forward at 512 / 1k (0.86x / 0.98x cuDNN's kernels in session 31's
#    grid, the Gluon kernel): the tile-level forward (FLASHTILE_GLUON_FWD=0) and the Gluon
#    forward with a program per item (FLASHTILE_GLUON_FWD_PERSISTENT=0) against it.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=300 AB_TIMEOUT=60 AB_COMPILE_S=40 AB_ENVS="FLASHTILE_BWD_DQ=two-pass;FLASHTILE_BWD_DQ=two-pass FLASHTILE_GLUON_DQ=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 1k,2k,4k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -6 $O/b.log
( OUT=$O/f; AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=40 AB_COMPILE_S=40 AB_ENVS="FLASHTILE_GLUON_FWD=0;FLASHTILE_GLUON_FWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times --headdims 64 --causal no --seqlens 512,1k" \
  bash scripts/gpu_session.sh ab ) > $O/f.log 2>&1
tail -5 $O/f.log
