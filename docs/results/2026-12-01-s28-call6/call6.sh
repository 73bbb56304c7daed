R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src; O=$OUT; export FLASHTILE_TEST_GPUS=1
G="FLASHTILE_GLUON_FWD=1"
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=400 AB_TIMEOUT=40 AB_COMPILE_S=50 AB_ENVS="$G;$G FLASHTILE_GLUON_FWD_CONFIG=64,64,4,240;$G FLASHTILE_GLUON_FWD_CONFIG=64,64,6,240;$G FLASHTILE_GLUON_FWD_CONFIG=64,64,8,240" AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 64 --causal yes --seqlens 512,1k,2k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
tail -8 $O/a.log
