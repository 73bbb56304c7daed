# Prepared in session 33 for the next session's third call (about 420 s), only if call 2's
# test_skip_masked_tiles_rows GQA cases passed (the mended GQA skip of the rows kernel):
# d=128 GQA 8:1 causal fwd+bwd kernel sums at 512/1k, FLASHTILE_GLUON_BWD_SKIP_MASKED=1
# against main (the skip off with GQA by default). A run that hangs is cut at AB_TIMEOUT.
# Prediction: -2% to -4% (the MHA rows kernel: -1.5% / -3.9%; with GQA the skipped tile
# recurs per query head, the same share of the item's products); if the query-tile ring
# order (HEADS_INNER) costs locality, less. Session 33 read the skip off at 575.6 / 894.1 µs
# (0.92x / 0.88x cuDNN's kernels).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=380 AB_TIMEOUT=110 AB_COMPILE_S=60 AB_ENVS="FLASHTILE_GLUON_BWD_SKIP_MASKED=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 128 --gqa 8 --causal yes --seqlens 512,1k" \
  bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
tail -6 $O/b.log
# Added in session 34: the test call 2's cut left unfinished and the test-times test
# that failed there (its child pytest inherited PYTEST_XDIST_WORKER; now _pytest_child),
# under xdist as in the GPU session.
( cd $PWD && python3 -m pytest -q -p no:cacheprovider -n 2 --timeout 240 \
  "tests/test_tools.py::test_shard_variable_selects_and_refuses" \
  "tests/test_tools.py::test_test_times_log_and_shards_balanced_by_it" ) > $O/t3.log 2>&1
tail -3 $O/t3.log
