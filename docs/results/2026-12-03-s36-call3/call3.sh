# Session 36 call 3 (~580 s): issue 7's grid at d=128 on today's main (bf16, flashtile against
# cuDNN in the same run, call times and kernel sums, with the plots; the last whole grid was
# session 31, since then sessions 32-33 changed the causal backward up to 1k), then the whole GPU suite's
# second shard (time-balanced by docs/results/gpu-test-times.tsv; last whole run: session 34).
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x
B="python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times"
timeout 270 $B --headdims 128 --out $O/x/grid128 > $O/grid128.log 2>&1
tar czf $O/x.tgz -C $O x && rm -rf $O/x
( OUT=$O/t2; FLASHTILE_TEST_SHARD=2/2 TEST_PROCS=16 TESTS_TIMEOUT=430 bash scripts/gpu_session.sh alltests ) > $O/t2.log 2>&1
grep -E "^│ +[0-9]|WRONG|geomean" $O/grid128.log; tail -6 $O/t2.log
