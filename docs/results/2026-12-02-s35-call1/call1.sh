# Prepared in session 34 (copy to docs/results/<date>-sNN-callK/callK.sh, commit, run; about
# 420 s): the d=64 dK/dV kernel's ring depth, causal chunk size and grid at the causal points
# where its one pass runs (2k, 4k; fwd+bwd kernels 0.87-0.91x cuDNN in session 34).
# - Ring depth, FLASHTILE_GLUON_BWD_CONFIG=64,64,6,240 against the default 4 slots: shared
#   memory (offline, sm_90a, one pass) 197 KB against 164 KB, one program per SM either
#   way, no spills. Prediction -1% to -3% (two more (Q, dO) tiles in flight against the
#   loads' latency at one program per SM). Session 34's call 4 read one round of it, 0.994x
#   / 0.995x, within main's own spread (its warm-up read 1597 / 2711 us against main's
#   1609-1612 / 2725-2732); this call gives it three rounds.
# - The causal order's chunks, FLASHTILE_GLUON_BWD_GROUP=4 against the rule's 8 (from 16
#   items per head; 1 up to 8), last measured against 8 in session 13, before the one pass
#   and the persistent grid changed an item's length. Prediction level to -2% at 2k (16
#   items: chunks of 8 are half a head, the heaviest-first order mostly lost), level at 4k.
# - One program per item, FLASHTILE_GLUON_BWD_PERSISTENT=0, against d=64's persistent grid
#   (persistent_ahead: session 12, -1% to +7% beyond 512, before the one pass, the skip and
#   the one-loop dQ). Prediction level to +2% (a causal grid of uneven items wants the
#   persistent grid's balance).
# Kernel sums, three alternating rounds (~25 s a run: warm-up + 12 runs, ~330 s).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=3 AB_BUDGET=420 AB_TIMEOUT=45 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_CONFIG=64,64,6,240;FLASHTILE_GLUON_BWD_GROUP=4;FLASHTILE_GLUON_BWD_PERSISTENT=0" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64 --causal yes --seqlens 2k,4k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -8 $O/b.log
