R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src; O=$OUT; export FLASHTILE_TEST_GPUS=1
STALL_TIMEOUT=60 STALL_POINTS="64:512:causal 64:1024:causal" timeout 200 bash scripts/gpu_session.sh stallsrc 2>&1 | tail -30
