# Session 38 call 3 (~180 s): issue 7's fp16 grid on today's main (session 37's d=128 causal
# 1k tile rule included; the last whole bf16 grid was session 36's, before it), flashtile
# against cuDNN, each point timed in 3 rounds with the providers in turn (new `--rounds`; the
# order reversed in round 2), call times and kernel sums, both head dims in one process.
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x
timeout 540 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 3 --dtype fp16 \
  --out $O/x/grid > $O/grid.log 2>&1
tar czf $O/x.tgz -C $O x && rm -rf $O/x
grep -E "geomean|worst|WRONG|benchmark done" $O/grid.log | tail -12
