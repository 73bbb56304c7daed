# Session 40, call 5 (the warm machine's last ~100 s, typed as one command): the same chunk
# order at d=96 and d=256 causal 512, FLASHTILE_GLUON_FWD_GROUP auto (1) then 8, one round each.
export PYTHONPATH=$PWD/src; for g in auto 8; do FLASHTILE_GLUON_FWD_GROUP=$g timeout 60 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd --headdims 96,256 --causal yes --seqlens 512 --kernel-times --no-plot --out $OUT/g$g > $OUT/g$g.log 2>&1; grep -E "│ +(96|256)" -A2 $OUT/g$g.log | grep -E "kernels|│ +(96|256)" | cut -c1-120; done
