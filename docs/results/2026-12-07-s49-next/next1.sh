# Prepared by session 49 for the next session's first call (CALL_S, default 420 s):
# 1. the GPU tests whose assertions session 49 changed offline with causal GQA's new default
#    (per query head): test_rows_layout, test_skip_masked_tiles_rows, and the per-query-head
#    tests in fp16 (call 6 ran bf16 only);
# 2. on an H200, the backward preprocess sweep (~20 s, owed since session 47);
# 3. GQA 8:1 forward+backward at d=64 (the transposed dK/dV kernel, per KV head: is its causal
#    short point as far behind cuDNN as d=128's was?) and the unmasked d=128 A/B of
#    FLASHTILE_GLUON_BWD_EXPAND=1 against its per-KV-head default, cuDNN in every run, 2 rounds.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
timeout -s INT 150 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwdrows_hopper.py tests/test_bwd_hopper.py \
  -k "test_rows_layout or test_skip_masked_tiles_rows or per_query_head" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
if echo "$GPU" | grep -q H200; then
  timeout 60 python3 scripts/preprocess_sweep.py --json $OUT/preprocess.json > $OUT/preprocess.log 2>&1
  tail -12 $OUT/preprocess.log
fi
timeout 80 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 64 \
  --gqa 8 --seqlens 1k,4k,16k --causal both --kernel-times --out $OUT/d64gqa 2>&1 | grep -E "^│ +[0-9]|WRONG"
AB_BUDGET=$((${CALL_S:-420} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=60 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_BWD_EXPAND=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 128 --gqa 8 --seqlens 1k,4k,16k --causal no --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tar czf $OUT/d64gqa.tgz -C $OUT d64gqa && rm -rf $OUT/d64gqa
tail -12 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
