# Session 41, call 3 (run inline on the warm H100 after call 2; recorded here as run): issue
# 7's grid in bf16 with the Gluon forward's causal windows by default, two rounds.
export PYTHONPATH=$PWD/src; O=$OUT; timeout 330 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 --dtype bf16 --out $O/bf16 > $O/bf16.log 2>&1; echo rc $?; grep -E "geomean|WRONG" $O/bf16.log; python3 scripts/grid_table.py $O/bf16/bench-*.json | tail -12
