# Session 44, call 2 (session 43's call A): the Gluon forward's tests against float64 on the
# GPU with session 43's default (each item's S_0 ahead at d=64 unmasked up to 512 keys), then
# issue 7's grid in bf16, two rounds, cuDNN in the same run (DTYPE=fp16 for the second dtype).
export PYTHONPATH=$PWD/src; O=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 230 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_fwd_hopper.py \
  > $O/tests.log 2>&1; echo "tests rc $?"; tail -2 $O/tests.log
timeout 330 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --rounds 2 \
  --dtype ${DTYPE:-bf16} --out $O/grid > $O/grid.log 2>&1; echo "grid rc $?"
grep -E "geomean|WRONG" $O/grid.log; python3 scripts/grid_table.py $O/grid/bench-*.json | tail -12
