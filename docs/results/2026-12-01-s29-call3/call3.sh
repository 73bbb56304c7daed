# session 29, call 3: issue 7's other shapes (d=96/256 and GQA 8 against d=128 MHA, with cuDNN in
# the same run) on main after sessions 24-28's forward changes (last measured in session 23)
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd --causal both --kernel-times"
timeout 230 $B --headdims 96,128 --seqlens 1k,4k,16k --out $O/x/d96 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
timeout 130 $B --headdims 128 --gqa 8 --seqlens 1k,4k,16k --out $O/x/gqa 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
timeout 90 $B --headdims 256 --seqlens 4k --out $O/x/d256 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
tar czf $O/x.tgz -C $O x && rm -rf $O/x
