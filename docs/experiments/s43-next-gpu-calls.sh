# Prepared in session 43 (its device time went to session 42's two prepared calls and to five
# refused or dropped starts; every call since session 39 ran on an H100). Three calls; copy
# each to docs/results/<date>-sNN-callK/callK.sh, commit, run `export OUT; bash <path>`.
# Name `kind: nvidia-h100-x1` unless an H200 is wanted: a refused start costs 15-90 s.
#
# Call R first (~420 s): the one pass's rotated items (FLASHTILE_GLUON_BWD_ROTATE=1, written
# offline in session 43, never run): its GPU tests against float64, then backward kernel sums
# against the default, unmasked d=64/128 at 1k/4k/16k, two alternating rounds. Why: in
# session 41's grid the unmasked backward's kernels fall behind cuDNN's as a head's items grow
# in number (d=128 0.96x at 512 to 0.78x at 16k, d=64 1.08x to 0.85x) while the causal ones,
# whose items already start at different query tiles, hold; unrotated, up to 128 programs
# add into the same dQ tile at once. Prediction: -3% to -10% at 16k, -1% to -3% at 4k, level
# at 1k if the reductions' contention is the cause; level everywhere if it is the card's
# clock (session 42's reading of the 16k swings). If it leads from 4k on, make it the rule
# for unmasked one passes (rotates(): by length), then tests/test_bwd_hopper.py and
# tests/test_bwdrows_hopper.py on the GPU.
#   export PYTHONPATH=$PWD/src
#   timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_bwd_hopper.py \
#     -k "rotat" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
#   AB_ROUNDS=2 AB_BUDGET=330 AB_TIMEOUT=70 AB_COMPILE_S=30 \
#   AB_CMD="python3 -m flashtile bench --providers flashtile --kernel-times --no-plot \
#     --mode bwd --causal no --headdims 64,128 --seqlens 1k,4k,16k --dtype bf16" \
#   AB_ENVS="FLASHTILE_GLUON_BWD_ROTATE=1" bash scripts/gpu_session.sh ab
#
# Call A (~560 s): the Gluon forward's tests against float64 on the GPU with session 43's
# default (each item's S_0 ahead at d=64 unmasked up to 512 keys, fwd_hopper.
# NEXT_S0_UNMASKED_UPTO: the path test_next_s0 forces), then issue 7's grid in bf16, two
# rounds, cuDNN in the same run: the first grid with the d=64 causal 2k windows (session 42)
# and NEXT_S0 at d=64 unmasked 512 (expected there: 0.87x -> ~0.93x cuDNN by kernels).
export PYTHONPATH=$PWD/src; O=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 230 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_fwd_hopper.py \
  > $O/tests.log 2>&1; echo "tests rc $?"; tail -2 $O/tests.log
timeout 330 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 \
  --dtype bf16 --out $O/bf16 > $O/bf16.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG" $O/bf16.log; python3 scripts/grid_table.py $O/bf16/bench-*.json | tail -12
#
# Call B (~330 s): the same grid in fp16 (replace bf16 by fp16 in the bench line above, and
# drop the tests). If an H200 is lent, both calls there: the gate's card, never measured with
# the windows (sessions 41-42) nor with NEXT_S0 at d=64 unmasked 512.
