# Prepared by session 49 for the next session's first call (CALL_S, default 420 s):
# 1. the GPU tests whose assertions session 49 changed offline with causal GQA's new default
#    (per query head in the rows kernel): test_rows_layout, test_skip_masked_tiles_rows; the
#    per-query-head tests in both dtypes (call 6 ran the rows kernel's in bf16 only), among
#    them two never run on a GPU: the transposed kernel's at d=64/96
#    (FLASHTILE_GLUON_BWD_EXPAND=1) and the rows kernel's float32 atomic adds
#    (FLASHTILE_GLUON_BWD_EXPAND_ADD=1, with a plan replay); the zero-fill kernel;
# 2. on an H200, the backward preprocess sweep (~20 s, owed since session 47);
# 3. an A/B of GQA 8:1 d=128 causal forward+backward at 1k/4k/16k: main (per-query-head parts
#    summed after) against FLASHTILE_GLUON_BWD_EXPAND_ADD=1 (added by atomics), cuDNN in every
#    run, kernel sums, 2 rounds. Then next2.sh.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
timeout -s INT 180 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py \
  -k "test_rows_layout or test_skip_masked_tiles_rows or per_query_head or zero_pair" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
if echo "$GPU" | grep -q H200; then
  timeout 60 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json > $OUT/preprocess.log 2>&1
  tail -12 $OUT/preprocess.log
fi
AB_BUDGET=$((${CALL_S:-420} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=60 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND_ADD=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -16 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
