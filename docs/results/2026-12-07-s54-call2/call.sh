# Session 54, call 2 (~420 s): (1) the GPU tests that call 1 failed, mended (the rows kernel's
# causal GQA grid is now claimed from 8 items per head; test_claimed_grid's GQA case halved,
# OOM at -n 6); (2) issue 7's bf16 grid against cuDNN, d=64/128, 512-16k, both masks, fwd and
# fwd+bwd, kernel sums, one round (the first since the claimed rows backward became the
# default); (3) the claimed grids' A/B in one: FLASHTILE_GLUON_BWD_DYNAMIC=0 (one program per
# item in both dK/dV kernels) and =1 (claimed in both) against the default (claimed in the d=128
# rows kernel from 1k keys, one program per item in d=64's transposed one pass), causal 2k,
# d=64/128, bf16 and fp16: =0/main is the rows kernel's claims (session 53: -3% to -9% at 2k),
# =1/main d=64's (never run on a GPU); the per-kernel table shows the fp16 preprocess with
# its count store moved to the end (~96 us expected, 158-163 us in session 53).
#   export OUT; CALL_S=500 bash docs/results/2026-12-07-s54-call2/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 90 python3 -m pytest -q -rf -n 6 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py \
  -k "test_rows_per_query_head or test_claimed_grid" > $OUT/tests.log 2>&1
echo "tests rc $?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
unset FLASHTILE_AUTOTUNE
timeout -s INT 200 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd fwdbwd \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 --no-plot \
  --dtype bf16 --out $OUT/grid > $OUT/grid.log 2>&1; echo "grid rc $? at $((SECONDS - T0)) s"
cp $OUT/grid/bench-*.json $OUT/ 2>/dev/null; rm -rf $OUT/grid
export FLASHTILE_AUTOTUNE=0; mkdir -p $OUT/ab
left=$(( ${CALL_S:-500} - (SECONDS - T0) - 10 ))
(OUT=$OUT/ab AB_BUDGET=$left AB_ROUNDS=2 AB_TIMEOUT=60 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=0;FLASHTILE_GLUON_BWD_DYNAMIC=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 64,128 --dtype bf16 fp16 --seqlens 2k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -v "^[│-]" $OUT/ab/ab.log | head -40
python3 scripts/grid_table.py $OUT/bench-*.json | tail -14
echo "elapsed $((SECONDS - T0)) s"
