# Session 41, call 4 (run inline on the warm H100; recorded here as run): the d=256 dQ
# kernel's causal chunks (FLASHTILE_GLUON_DQ256_GROUP auto = 1 at 512 keys, against 8),
# forward+backward d=256 causal 512, two alternating rounds; then issue 7's grid in fp16,
# two rounds. (The dq runs' tarball did not come back; their lines are in the call's output,
# copied into docs/perf.md.)
export PYTHONPATH=$PWD/src; O=$OUT; for r in 1 2; do for g in auto 8; do FLASHTILE_GLUON_DQ256_GROUP=$g timeout 60 python3 -m flashtile bench --providers flashtile,cudnn --mode fwdbwd --causal yes --headdims 256 --seqlens 512 --kernel-times --no-plot --out $O/dq$g-r$r > $O/dq$g-r$r.log 2>&1; python3 -c "
import json,glob,sys
rows=json.load(open(glob.glob('$O/dq$g-r$r/bench-*.json')[0]))['results']
f=[x for x in rows if x['provider']=='flashtile'][0]; c=[x for x in rows if x['provider']=='sdpa-cudnn'][0]
print('dq256 group $g round $r', round(f['kernel_ms']*1e3,1), 'us cuDNN', round(c['kernel_ms']*1e3,1), f['configs'], f['check']['status'])"; done; done; timeout 190 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 --dtype fp16 --out $O/fp16 > $O/fp16.log 2>&1; echo rc $?; python3 scripts/grid_table.py $O/fp16/bench-*.json | tail -12; cd $O && tar czf dq.tgz dq* && rm -rf dq*
