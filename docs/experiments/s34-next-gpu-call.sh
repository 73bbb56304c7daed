# Prepared in session 34 (its device time went to refused starts; copy to
# docs/results/<date>-sNN-callK/callK.sh, commit, run; about 330 s): the d=64 dK/dV kernel's
# ring depth and its causal chunk size at the causal points where its one
# pass runs (2k, 4k; fwd+bwd kernels 0.87-0.89x cuDNN in session 33). Shared memory
# (offline, sm_90a, one pass): 4 slots (the default) 164 KB, 6 slots 197 KB; one program per
# SM either way, no spills. Prediction: 6 slots -1% to -3% (two more (Q, dO) tiles in flight
# against the loads' latency at one program per SM). The causal order's chunks
# (FLASHTILE_GLUON_BWD_GROUP; 8 from 16 items per head, 1 up to 8): 4 at 2k/4k, last measured
# against 8 in session 13, before the one pass and the persistent grid changed the item's
# length; prediction level to -2% at 2k (16 items: chunks of 8 are half a head, the
# heaviest-first order mostly lost), level at 4k. Kernel sums, two alternating rounds.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=45 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_CONFIG=64,64,6,240;FLASHTILE_GLUON_BWD_GROUP=4" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 2k,4k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -8 $O/b.log
