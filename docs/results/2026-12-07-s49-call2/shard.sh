# Session 49, calls 2-4: the whole GPU suite on main in three shards (SHARD=1/3, 2/3, 3/3; one a
# call), balanced by session 40's seconds per file (docs/results/gpu-test-times.tsv, refreshed
# this session). The suite last ran whole in session 40 (1,858 passed); since then the Gluon
# forward's windows, the rotated one pass, masks.py, bwd.py and common.py changed. 16 processes
# on an H200, 8 on an H100 (float64 references ran out of its 80 GB with 16 in session 39).
export PYTHONPATH=$PWD/src; O=$OUT; n=${SHARD:?SHARD=i/3}; tag=t${n%%/*}
procs=16; nvidia-smi --query-gpu=name --format=csv,noheader | tee /dev/stderr | grep -q H100 && procs=8
( OUT=$O/$tag; FLASHTILE_TEST_SHARD=$n TEST_PROCS=$procs TESTS_TIMEOUT=${TESTS_TIMEOUT:-540} \
  bash scripts/gpu_session.sh env alltests ) > $O/$tag.log 2>&1; tail -8 $O/$tag.log
tar czf $O/$tag.tgz -C $O $tag && rm -rf $O/$tag
