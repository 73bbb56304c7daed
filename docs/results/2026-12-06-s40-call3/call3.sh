# Session 40, call 3: the whole GPU suite, shard 2/2 (tests/conftest.py balances the shards by
# docs/results/gpu-test-times.tsv), on main with d=64's serial backward (session 39) by default.
# 16 processes on an H200 (141 GB); on an H100 (80 GB) 8: float64 references ran out of memory
# with 16 there (session 39).
export PYTHONPATH=$PWD/src; O=$OUT
procs=16; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && procs=8
( OUT=$O/t2; FLASHTILE_TEST_SHARD=2/2 TEST_PROCS=$procs TESTS_TIMEOUT=540 \
  bash scripts/gpu_session.sh env alltests ) > $O/t2.log 2>&1; tail -6 $O/t2.log
tar czf $O/t2.tgz -C $O t2 && rm -rf $O/t2
