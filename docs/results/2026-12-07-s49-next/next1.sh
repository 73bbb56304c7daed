# Prepared by session 49 for the next session's first call (CALL_S, default 480 s):
# 1. the GPU tests whose assertions session 49 changed offline with causal GQA's new default
#    (per query head in the rows kernel): test_rows_layout, test_skip_masked_tiles_rows; the
#    per-query-head tests in both dtypes (call 6 ran the rows kernel's in bf16 only), among
#    them the transposed kernel's at d=64/96 (FLASHTILE_GLUON_BWD_EXPAND=1; never run on a GPU);
# 2. on an H200, the backward preprocess sweep (~20 s, owed since session 47);
# 3. an A/B of GQA 8:1 forward+backward at d=64 and d=128, 1k/4k/16k, both masks: main (d=128
#    causal per query head, the rest per KV head) against FLASHTILE_GLUON_BWD_EXPAND=1 (every
#    point per query head), cuDNN in every run, kernel sums, 2 rounds.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
timeout -s INT 170 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py \
  -k "test_rows_layout or test_skip_masked_tiles_rows or per_query_head" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
if echo "$GPU" | grep -q H200; then
  timeout 60 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json > $OUT/preprocess.log 2>&1
  tail -12 $OUT/preprocess.log
fi
AB_BUDGET=$((${CALL_S:-480} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=90 AB_COMPILE_S=40 \
  AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 64,128 --gqa 8 --seqlens 1k,4k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -20 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
