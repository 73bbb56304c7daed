# Session 34, call 4 (the command as run, on the machine call 3 left warm; 144 s): the d=64
# dK/dV kernel's ring depth, 6 slots against the default 4, at causal 2k/4k (one pass).
# Prediction -1% to -3%. Round 2's variant did not fit AB_BUDGET (the session's device time).
export PYTHONPATH=$PWD/src; O=$OUT; ( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=170 AB_TIMEOUT=40 AB_COMPILE_S=25 AB_ENVS="FLASHTILE_GLUON_BWD_CONFIG=64,64,6,240" AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 2k,4k" bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1; tail -6 $O/b.log
