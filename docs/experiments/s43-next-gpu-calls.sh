# Prepared in session 43 (its device time went to session 42's two prepared calls and to five
# refused or dropped starts; every call since session 39 ran on an H100). Two calls; copy each
# to docs/results/<date>-sNN-callK/callK.sh, commit, run `export OUT; bash <path>`.
# Name `kind: nvidia-h100-x1` unless an H200 is wanted: a refused start costs 15-90 s.
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
