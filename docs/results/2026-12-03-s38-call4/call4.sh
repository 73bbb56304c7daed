# Session 38 call 4 (~90 s): where the host time of the 512-key forward+backward goes on the
# H200's host (calls 2-3: d=64 causal 512 fwd+bwd 0.77x / 0.81x cuDNN by call but 1.09x /
# 1.07x by kernels; flashtile's rounds 634-897 us against kernels of 575-604 us, cuDNN flat at
# 637). host_overhead.py --gpu: real launches, the step's wall time with the device behind,
# then a cProfile of 50 steps (internal time); bf16 (1, 512, 16, d) causal (FLASHTILE_AUTOTUNE=0
# as the script sets: the first fitting config; the bench autotunes, same launches after).
export PYTHONPATH=$PWD/src; O=$OUT
for a in "--headdim 64 --seqlen 512" "--headdim 128 --seqlen 512" "--headdim 64 --seqlen 2048"; do
  for w in fwdbwd fwd; do
    echo "=== $w $a"
    PROFILE_SORT=tottime timeout 60 python3 scripts/host_overhead.py --gpu --what $w $a \
      --calls 300 --profile 2>&1 | head -45
  done
done > $O/host.log 2>&1
grep -E "^===|host time per call|GPU:" $O/host.log
