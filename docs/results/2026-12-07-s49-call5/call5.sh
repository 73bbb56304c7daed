# Session 49, call 5: issue 7's other shapes (d=96 and d=256 and GQA 8 against d=128 MHA, cuDNN in
# the same run), last measured in session 29 (its call 3, the same commands); since then the
# Gluon forward's causal windows (session 41: d=96 causal -19%) and the backward's defaults moved.
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --causal both --kernel-times"
timeout 200 $B --headdims 96,128 --seqlens 1k,4k,16k --out $O/x/d96 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
timeout 120 $B --headdims 128 --gqa 8 --seqlens 1k,4k,16k --out $O/x/gqa 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
timeout 90 $B --headdims 256 --seqlens 4k --out $O/x/d256 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
tar czf $O/x.tgz -C $O x && rm -rf $O/x
echo "elapsed $((SECONDS - T0)) s"
