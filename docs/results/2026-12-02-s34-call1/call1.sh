# Prepared in session 33 for the next session's first call (copy to
# docs/results/<date>-sNN-call1/call1.sh, commit, then run `bash <that path>`; about 560 s).
# The whole GPU suite's first shard (its files by test count, tests/conftest.py), each test
# phase's seconds in t1/times.tsv (FLASHTILE_TEST_TIMES: the log survives a cut; keep it in
# docs/results and pass it as FLASHTILE_TEST_SHARD_TIMES to balance later shards by time),
# and pytest-timeout's 240 s per test, so that a hung kernel fails its test (its worker
# replaced) instead of holding the call. Session 32's shard 1 took 178 s on a smaller tree.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t1; FLASHTILE_TEST_SHARD=1/2 TEST_PROCS=16 TESTS_TIMEOUT=540 bash scripts/gpu_session.sh alltests ) > $O/t1.log 2>&1
tail -6 $O/t1.log
