R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src
O=$OUT
export FLASHTILE_TEST_GPUS=1
( OUT=$O/t; TEST_PROCS=12 TESTS_TIMEOUT=140 PYTEST_ARGS="tests/test_fwd_hopper.py" bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
grep -E "passed|failed|FAILED|Error" $O/t.log | head -20
B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --kernel-times"
( OUT=$O/a; AB_ROUNDS=2 AB_BUDGET=215 AB_TIMEOUT=35 AB_ENVS="FLASHTILE_GLUON_FWD_Q_REGS=0;FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_Q_REGS=1" AB_CMD="$B --headdims 128,64 --causal yes --seqlens 512,1k,2k" bash scripts/gpu_session.sh ab ) > $O/a.log 2>&1
grep -v "^│" $O/a.log | tail -8
mkdir -p $O/x; timeout 150 $B --headdims 64,128 --seqlens 512,1k,2k,4k,8k,16k --causal both --out $O/x/grid 2>&1 | grep -E "^│ +[0-9]|WRONG|geomean"; tar czf $O/x.tgz -C $O x && rm -rf $O/x
