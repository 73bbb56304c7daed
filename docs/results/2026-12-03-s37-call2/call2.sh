# Session 37, call 2: session 36's prepared docs/experiments/s36-next-gpu-call.sh as it was.
# Prepared in session 36 (no device time was left): issue 7's grid in fp16 on today's main (the
# gate is bf16 and fp16; the last fp16 grid is session 17's) and the other shapes that issue 7
# asks within 15% of d=128 MHA (GQA 8, d=256; last measured in session 29), flashtile against
# cuDNN in the same run, call times and kernel sums. About 450 s. Copy to
# docs/results/<date>-sNN-callK/, commit, run `export OUT; bash <that path>`; d=96 (session 29's
# call 3, ~230 s) fits in a second call.
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x
B="python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --kernel-times"
timeout 150 $B --dtype fp16 --seqlens 512,1k,2k,4k,8k,16k --headdims 64 --out $O/x/fp16-d64 > $O/fp16.log 2>&1
timeout 150 $B --dtype fp16 --seqlens 512,1k,2k,4k,8k,16k --headdims 128 --out $O/x/fp16-d128 >> $O/fp16.log 2>&1
timeout 110 $B --no-plot --headdims 128 --gqa 8 --seqlens 1k,4k,16k --out $O/x/gqa > $O/shapes.log 2>&1
timeout 60 $B --no-plot --headdims 256 --seqlens 4k --out $O/x/d256 >> $O/shapes.log 2>&1
tar czf $O/x.tgz -C $O x && rm -rf $O/x
grep -E "^│ +[0-9]|WRONG|geomean" $O/fp16.log $O/shapes.log
