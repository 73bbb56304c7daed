# Prepared in session 40 (its device time went to issue 7's grid and the GPU suite on an H100,
# then the finding below): the causal order's windows (FLASHTILE_GLUON_FWD_WINDOW,
# FLASHTILE_GLUON_BWD_WINDOW; opt-in, unmeasured) against chunks of 1 (the rule) and chunks
# of 8. Copy to docs/results/<date>-sNN-callK/callK.sh, commit, run `export OUT; bash <path>`.
#
# Call A (~550 s; on an H100 cut the second round's d=96 if short): forward kernel sums at
# 512 keys causal, d=128 / 256 / 96, and d=128 1k; forward+backward at d=64 and d=128 causal
# 512 / 1k (the dK/dV kernels' chunks of 1, or one chunk of every tile), three variants in two
# alternating rounds, cuDNN in every run (same-run ratios). Note: the `g8` forward variant
# forces chunks of 8 (no windows) also at 1k, where 8 is the rule: there `rule` = `g8`.
#   export PYTHONPATH=$PWD/src; O=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader
#   run() {  # $1 name, $2 variables, $3.. bench arguments
#     local name=$1 vars=$2; shift 2
#     env $vars timeout 120 python3 -m flashtile bench --providers flashtile,cudnn --kernel-times \
#       --no-plot --causal yes --out $O/$name "$@" > $O/$name.log 2>&1
#     grep -E "│ +(64|96|128|256) " -A2 $O/$name.log | grep -E "kernels|│ +[0-9]" | cut -c1-110
#   }
#   for r in 1 2; do
#     for v in "rule:FLASHTILE_GLUON_FWD_WINDOW=0" "g8:FLASHTILE_GLUON_FWD_GROUP=8" \
#              "win:FLASHTILE_GLUON_FWD_WINDOW=auto"; do
#       run fwd-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 128,256,96 --seqlens 512
#       run fwd1k-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 128 --seqlens 1k
#     done
#     for v in "rule:FLASHTILE_FWD_WINDOW=0" "win:FLASHTILE_FWD_WINDOW=auto"; do
#       run fwd64-${v%%:*}-r$r "${v#*:}" --mode fwd --headdims 64 --seqlens 512,1k
#     done
#     for v in "rule:FLASHTILE_GLUON_BWD_WINDOW=0" "g8:FLASHTILE_GLUON_BWD_GROUP=8" \
#              "win:FLASHTILE_GLUON_BWD_WINDOW=auto"; do
#       run bwd-${v%%:*}-r$r "${v#*:}" --mode fwdbwd --headdims 64,128 --seqlens 512,1k
#     done
#   done
#   cd $O && tar czf runs.tgz fwd* bwd-* && rm -rf fwd* bwd-*
#
# Prediction (scripts/order_model.py): the persistent forward with windows reads as chunks of
# 8 (same bytes, same span: auto's windows span whole pairs of rounds); the d=128 one pass
# (one program per item when causal) a few % ahead of chunks of 8; d=64's backward at 512/1k
# ahead of chunks of 1 by its bytes; the tile-level forward (d=64 causal 512/1k,
# FLASHTILE_FWD_WINDOW) 3-6% faster (its grid no longer ends on heavy blocks). The open
# question is the H200's chunks of 1 against 8.
# If the windows lead (or level with the better parent at every point), make `auto` their
# default (common.causal_window's and fwd.window_pairs' variables), run the
# forward and backward GPU test files (PYTEST_ARGS="tests/test_fwd_hopper.py
# tests/test_bwd_hopper.py", TEST_PROCS 16 on an H200, 8 on an H100) and issue 7's grid
# (session 39's call A: docs/results/2026-12-06-s40-call1/call1.sh).
