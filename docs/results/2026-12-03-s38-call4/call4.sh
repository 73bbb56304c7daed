# Session 38 call 4 (~560 s): (1) where the host time of the 512-key forward+backward goes on
# the H200's host (calls 2-3: d=64 causal 512 fwd+bwd 0.77x / 0.81x cuDNN by call but 1.09x /
# 1.07x by kernels; flashtile's rounds 634-897 us against kernels of 575-604 us, cuDNN flat at
# 637): host_overhead.py --gpu (real launches; the step's wall time with the device behind,
# then a cProfile of 50 steps by internal time), bf16 (1, 512, 16, d) causal, d=64 (two
# passes) and d=128 (one pass). (2) The whole GPU suite's second shard on main (the last
# whole run was session 36's; session 37 changed the d=128 causal tile rule and ran the
# forward's file only).
export PYTHONPATH=$PWD/src; O=$OUT
for a in "--headdim 64 --seqlen 512" "--headdim 128 --seqlen 512"; do
  for w in fwdbwd fwd; do
    echo "=== $w $a"
    PROFILE_SORT=tottime timeout 90 python3 scripts/host_overhead.py --gpu --what $w $a \
      --calls 300 --profile 2>&1 | head -40
  done
done > $O/host.log 2>&1
grep -E "^===|host time per call|GPU:" $O/host.log
( OUT=$O/t2; FLASHTILE_TEST_SHARD=2/2 TEST_PROCS=16 TESTS_TIMEOUT=400 \
  bash scripts/gpu_session.sh alltests ) > $O/t2.log 2>&1
tail -5 $O/t2.log
tar czf $O/t2.tgz -C $O t2 && rm -rf $O/t2
