# Prepared in session 39 (its device time ran out, and every call ran on an H100): the H200
# readings of d=64's backward in the serial order at 128 queries per tile (default since
# session 39) and the whole GPU suite after it. Three device calls; copy each part to
# docs/results/<date>-sNN-callK/callK.sh, commit, run `export OUT; bash <that path>`.
#
# Call A (~360 s): issue 7's whole grid in bf16 and fp16, three interleaved rounds (session
# 38's command, so the d=128 rows read as a control for the run's drift).
#   export PYTHONPATH=$PWD/src; O=$OUT
#   for dt in bf16 fp16; do
#     timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
#       --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 \
#       --rounds 3 --dtype $dt --out $O/$dt > $O/$dt.log 2>&1
#     grep -E "geomean|WRONG" $O/$dt.log
#   done
#
# Calls B and C (~420 s each): the GPU suite in two shards (tests/conftest.py balances them
# by docs/results/gpu-test-times.tsv).
#   export PYTHONPATH=$PWD/src; O=$OUT
#   ( OUT=$O/t1; FLASHTILE_TEST_SHARD=1/2 TEST_PROCS=16 TESTS_TIMEOUT=400 \
#     bash scripts/gpu_session.sh alltests ) > $O/t1.log 2>&1; tail -5 $O/t1.log
#   tar czf $O/t1.tgz -C $O t1 && rm -rf $O/t1
# (and FLASHTILE_TEST_SHARD=2/2 in the next call). On an H100 (79 GB) 16 processes ran out of
# memory in ten float64 references (session 39, call 3): there, TEST_PROCS=8.
