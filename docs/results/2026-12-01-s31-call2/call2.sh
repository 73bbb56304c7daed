# session 31, call 2: the parameter cache (session 30) on the H200 through the idle probe
# (session 30 call 1 is the "before"), then FLASHTILE_ONE_LOOP=1 against main where the
# tile-level dQ runs by default (every causal fwd+bwd), at d=64 and d=128 causal, 512 / 2k / 8k
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/i; IDLE_TIMEOUT=170 bash scripts/gpu_session.sh idle ) > $O/i.log 2>&1
tail -12 $O/i.log
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=360 AB_TIMEOUT=80 AB_COMPILE_S=60 AB_ENVS="FLASHTILE_ONE_LOOP=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,2k,8k" \
  bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -10 $O/a.log
