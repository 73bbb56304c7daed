# Session 34, run in the same device call as call3.sh (the session's device time left one
# call; about 150 s): the d=64 dK/dV kernel's ring depth at the causal points where its one
# pass runs (2k, 4k; fwd+bwd kernels 0.87-0.89x cuDNN in session 33). Shared memory
# (offline, sm_90a, one pass): 4 slots (the default) 164 KB, 6 slots 197 KB; one program per
# SM either way, no spills. Prediction: 6 slots -1% to -3% (two more (Q, dO) tiles in flight
# against the loads' latency at one program per SM). Kernel sums, two alternating rounds.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b4; AB_ROUNDS=2 AB_BUDGET=150 AB_TIMEOUT=45 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_CONFIG=64,64,6,240" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 2k,4k" \
  bash scripts/gpu_session.sh ab ) > $O/b4.log 2>&1
tail -8 $O/b4.log
