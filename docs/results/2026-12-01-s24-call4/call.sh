R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times"
export FLASHTILE_TEST_GPUS=1
( OUT=$O/t; PYTEST_ARGS="tests/test_fwd_hopper.py" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
grep -E "passed|failed|FAILED|Error" $O/t.log | head -20
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=45 AB_ENVS="FLASHTILE_GLUON_FWD_NEXT_S0=0" AB_CMD="$B --headdims 128 --causal both --seqlens 512,1k,4k,16k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
grep -v "^│" $O/a.log | tail -9
( OUT=$O/b; AB_ROUNDS=2 AB_BUDGET=200 AB_TIMEOUT=40 AB_ENVS="FLASHTILE_GLUON_FWD_NEXT_S0=0;FLASHTILE_GLUON_FWD=1" AB_CMD="$B --headdims 64 --causal both --seqlens 512,1k,4k" bash scripts/gpu_session.sh ab ) > $O/b.log 2>&1
grep -v "^│" $O/b.log | tail -8
