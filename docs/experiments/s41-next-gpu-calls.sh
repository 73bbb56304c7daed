# Prepared in session 41 (its device time went to session 40's call A, the tests and the grid;
# every call ran on an H100). Copy to docs/results/<date>-sNN-callK/callK.sh, commit, run
# `export OUT; bash <path>`.
#
# Call A (~450 s): the d=64 causal forward up to 2k keys, where the gate's largest forward gap
# is (0.87-0.91x cuDNN at 512 / 1k / 2k, both dtypes, session 41). Up to 1k it runs the
# tile-level forward (fwd_hopper.CAUSAL_AHEAD_FROM[64] = 2048): the Gluon forward measured
# 1.09x / 1.03x its time at 512 / 1k in session 26 (H200), but then its causal order ran in
# chunks of 1 and re-read every head's K/V from HBM (1,024 heads x 128 KB = 128 MB at 512
# keys, past the L2); with the windows that session 41 made the default, d=128 causal 512 took
# 31% less time. Variants, forward kernel sums, two alternating rounds, cuDNN in every run:
#   tile  = the default (tile-level at 512/1k; Gluon in chunks of 8 at 2k)
#   gwin  = FLASHTILE_GLUON_FWD=1 (Gluon at every length; windows of 66 / 33 at 512 / 1k)
#   g1    = FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_GROUP=1 (2k: chunks of 1 in windows of
#           33 pairs, 16.5 MB; 512 / 1k as gwin)
#   gnone = FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_WINDOW=0 (session 26's order: the windows'
#           share)
# then forward+backward d=64 causal 512 / 1k, tile against gwin (the forward is ~1/3 of it),
# each also with the backward in one pass (`FLASHTILE_BWD_DQ=atomic`: dQ added in the dK/dV
# kernel, which there runs the serial order of session 39, 4-9% faster than the order that
# lost to two passes at causal up to 1k in session 32: bwd_hopper.one_pass), and d=128 causal
# 512's narrow tiles (64 keys x 4 slots, fwd_hopper.NARROW_CAUSAL_UPTO: 0.96x
# the wide tiles' time in session 37, before the windows) against the wide ones (128 x 2).
#   export PYTHONPATH=$PWD/src; O=$OUT; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
#   run() {  # $1 name, $2 variables, $3.. bench arguments (as s41 call 1's run())
#     local name=$1 vars=$2; shift 2
#     if (( SECONDS - T0 > 520 )); then echo "skip $name (time)"; return; fi
#     env $vars timeout 110 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
#       --no-plot --causal yes --headdims 64 --out $O/$name "$@" > $O/$name.log 2>&1
#     python3 scripts/grid_table.py --lines $O/$name/bench-*.json | sed "s/^/$name /"
#   }
#   for r in 1 2; do
#     for v in "tile:X=0" "gwin:FLASHTILE_GLUON_FWD=1" \
#              "g1:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_GROUP=1" \
#              "gnone:FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_WINDOW=0"; do
#       run fwd-${v%%:*}-r$r "${v#*:}" --mode fwd --seqlens 512,1k,2k --dtype bf16
#     done
#     for v in "tile:X=0" "gwin:FLASHTILE_GLUON_FWD=1" "one:FLASHTILE_BWD_DQ=atomic" \
#              "gwinone:FLASHTILE_GLUON_FWD=1 FLASHTILE_BWD_DQ=atomic"; do
#       run bwd-${v%%:*}-r$r "${v#*:}" --mode fwdbwd --seqlens 512,1k --dtype bf16
#     done
#     for v in "narrow:X=0" "wide:FLASHTILE_GLUON_FWD_CONFIG=64,128,2,240"; do   # d=128 only
#       run n128-${v%%:*}-r$r "${v#*:}" --mode fwd --seqlens 512 --dtype bf16 --headdims 128
#     done
#   done
#   cd $O && tar czf runs.tgz fwd-* bwd-* n128-* && rm -rf fwd-* bwd-* n128-*
#
# Prediction: gwin ahead of tile at 512 and 1k (by 5-15%: session 26's 1.09x / 1.03x less the
# windows' share, which gnone shows), g1 within 2% of the default at 2k. If gwin leads at both,
# lower CAUSAL_AHEAD_FROM[64] (to 0, or to 1024 if only 1k), run tests/test_fwd_hopper.py and
# tests/test_kernels.py on the GPU and issue 7's d=64 rows in both dtypes. If `one` leads
# `tile` (or `gwinone` leads `gwin`) at 512 / 1k, bwd_hopper.one_pass's d=64 causal
# exception goes (then tests/test_bwd_hopper.py on the GPU).
#
# Call B, on an H200 if one is lent (the gate's card; never measured with the windows):
# session 41's call 1 (docs/results/2026-12-06-s41-call1/call1.sh) with the rule variant
# FLASHTILE_GLUON_FWD_WINDOW=0 against the default, then issue 7's grid
# (docs/results/2026-12-06-s41-call3/call3.sh, both dtypes).
#
# Call C (~150 s; or appended to call A if time is left): why the d=64 unmasked forward+backward
# at 16k (b=1, h=32) reads 17.0 ms in some rounds and 19.0 in others (sessions 40-41; cuDNN
# steady at 16.7): five rounds with each round's kernels by name (`kernel_split_rounds`, new
# in session 41), then which kernel moves.
# A guess to weigh: the one pass adds every key tile's dQ part into fp32 dQ by TMA
# reductions; at 16k with b=1 that is 4,096 items x 4 MB = 16 GB of reductions through the
# L2 per call, so where a head's dQ lands (the L2's two partitions, by address) could set
# the time; two passes (no reductions) would then be steady.
#   export PYTHONPATH=$PWD/src; O=$OUT
#   for v in "one:X=0" "two:FLASHTILE_BWD_DQ=two-pass"; do
#     env ${v#*:} timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --mode fwdbwd \
#       --causal no --headdims 64 --seqlens 16k --kernel-times --rounds 5 --no-plot \
#       --out $O/split-${v%%:*} > $O/split-${v%%:*}.log 2>&1
#     python3 scripts/grid_table.py --lines --split $O/split-${v%%:*}/bench-*.json
#   done
