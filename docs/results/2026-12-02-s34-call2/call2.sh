# Prepared in session 33 for the next session's second call (about 580 s): the whole GPU
# suite's second shard (test_bwd_hopper with the rows kernel's mended GQA skip, forced in
# test_skip_masked_tiles_rows; the backward files; session 32's shard 2 outlasted 480 s).
# If it is cut again, call1's and this call's times.tsv together give a time-balanced split
# (FLASHTILE_TEST_SHARD_TIMES, three shards if need be).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t2; FLASHTILE_TEST_SHARD=2/2 TEST_PROCS=16 TESTS_TIMEOUT=560 bash scripts/gpu_session.sh alltests ) > $O/t2.log 2>&1
tail -6 $O/t2.log
