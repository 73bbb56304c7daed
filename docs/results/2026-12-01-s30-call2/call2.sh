# session 30, call 2: issue 7's whole grid (bf16) on today's main, flashtile against cuDNN in
# the same run, call times and kernel sums, with the plots (last whole grid: session 23)
export PYTHONPATH=$PWD/src; O=$OUT; mkdir -p $O/x
B="python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times"
for d in 128 64; do
  timeout 285 $B --headdims $d --out $O/x/grid$d 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"
done
tar czf $O/x.tgz -C $O x && rm -rf $O/x
