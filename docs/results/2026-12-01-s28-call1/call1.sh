R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src; O=$OUT; export FLASHTILE_TEST_GPUS=1
export FLASHTILE_GLUON_FWD=1 STALL_TIMEOUT=85 STALL_POINTS="64:4096 64:1024:causal 128:512:causal"
timeout 570 bash scripts/gpu_session.sh env stalls 2>&1 | tail -60
