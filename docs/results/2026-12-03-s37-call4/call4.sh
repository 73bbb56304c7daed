# Session 37, call 4 (~250 s): session 18's narrow-tile rule at d=128 causal (64 keys x 4
# slots up to 1k keys, 128 x 2 beyond) measured again: it predates P in registers (s21), own
# tiles per consumer and S_0 ahead (s24) and the scale in the exponent (s26). Forward kernel
# sums, d=128 causal 512/1k/2k, 3 alternating rounds: main against the wide tiles forced
# (changes 512/1k; 2k is a control) and the narrow tiles forced (changes 2k; 512/1k are
# controls). Prediction: the rule holds (wide 0-5% slower at 512/1k, narrow ~5% slower at 2k).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/p; AB_ROUNDS=3 AB_BUDGET=230 AB_TIMEOUT=35 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_FWD_CONFIG=64,128,2,240;FLASHTILE_GLUON_FWD_CONFIG=64,64,4,240" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 128 --causal yes --seqlens 512,1k,2k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
tail -8 $O/p.log
