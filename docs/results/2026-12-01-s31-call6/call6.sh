# session 31, call 6: one loop (default up to d=64) in the other test files whose calls run the
# tile-level forward / dQ kernels on the GPU: varlen, dropout, the SDPA drop-in (whole files),
# KV-cache and flex kernels (causal / window cases), bf16 and fp16 against float64
export PYTHONPATH=$PWD/src FLASHTILE_TEST_GPUS=1; O=$OUT
( OUT=$O/t; TEST_PROCS=16 TESTS_TIMEOUT=200 \
  PYTEST_ARGS="tests/test_varlen.py tests/test_dropout.py tests/test_sdpa.py tests/test_kvcache.py tests/test_flex_kernels.py" \
  PYTEST_K="test_varlen.py or test_dropout.py or test_sdpa.py or causal or window" \
  bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -6 $O/t.log
