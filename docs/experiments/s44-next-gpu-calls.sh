# Prepared in session 44 (its device time went to four calls on an H100 and five refused
# starts). Copy each call to docs/results/<date>-sNN-callK/callK.sh, commit, run
# `export OUT; bash <path>`. Every pytest run takes -rf, a per-test log (-v) and SIGINT at its
# timeout (pytest then still prints its summary, as `gpu_session.sh pytest` does), so that a
# cut run names its failures (session 44's call 4, killed by SIGTERM under -q, could not).
#
# Call T (~560 s): the backward's GPU test files on session 44's defaults: the rotated one
# pass at d=128 unmasked (bwd_hopper.ROTATE_HEADDIMS; the label tests now expect " rotated").
# Session 44 ran the rotation's own 45 GPU cases (passed) and both files with the rotation
# forced everywhere (cut at ~90%: 10 failures, the number of label assertions that expected
# no " rotated"; names not printed).
export PYTHONPATH=$PWD/src; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 540 python3 -m pytest -v -rf -n 8 -p no:cacheprovider tests/test_bwdrows_hopper.py \
  tests/test_bwd_hopper.py > $OUT/bwd-tests.log 2>&1; echo "bwd tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/bwd-tests.log | head -20; tail -1 $OUT/bwd-tests.log
#
# Call A (~560 s): the Gluon forward's GPU tests (not run since session 42; session 43's
# NEXT_S0 rule at d=64 unmasked 512 is the path test_next_s0 forces) and the tile-level
# forward's (test_gpu_matrix: d=64 causal up to 1,023 keys takes the pin), then issue 7's
# bf16 grid, two rounds, cuDNN in the same run. Expected against session 44's grid: d=128
# unmasked fwd+bwd at 2k-16k up 2-5% by kernels (the rotation); fp16 (call B) d=64 causal
# fwd 512/1k back to ~0.87x/0.89x (the pin; 0.80x/0.84x with the tuner's 128x64/8w/3s pick).
export PYTHONPATH=$PWD/src
timeout -s INT 250 python3 -m pytest -v -rf -n 8 -p no:cacheprovider tests/test_fwd_hopper.py \
  "tests/test_kernels.py::test_gpu_matrix" > $OUT/fwd-tests.log 2>&1; echo "fwd tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/fwd-tests.log | head
timeout 300 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 \
  --dtype ${DTYPE:-bf16} --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG" $OUT/grid.log; python3 scripts/grid_table.py $OUT/grid/bench-*.json | tail -12
#
# Call B (~200 s): the grid in fp16 (DTYPE=fp16, the bench line of call A alone).
#
# Call C (~150 s): the backward alone against cuDNN's, and inside forward+backward (perf.md
# session 44, "Next session" 2: the d=128 16k rows kernel took 12.1-12.4 ms inside the grid's
# forward+backward and 10.7-11.1 ms alone; cuDNN's backward 10.2-10.3 ms in the grid).
# Prediction: if it is the card's clock, cuDNN's backward alone is ~10% faster than inside too.
# export PYTHONPATH=$PWD/src
# timeout 200 python3 -m flashtile bench --providers flashtile,cudnn --mode bwd,fwdbwd \
#   --causal no --headdims 64,128 --seqlens 4k,16k --kernel-times --rounds 2 --dtype bf16 \
#   --out $OUT/bwd > $OUT/bwd.log 2>&1; echo "bwd rc $?"; grep -E "geomean|WRONG" $OUT/bwd.log
