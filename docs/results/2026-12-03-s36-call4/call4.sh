# Session 36 call 4: the rest of the whole GPU suite's first shard (call 2's was cut at 290 s
# after 433 passed; the machine was then taken back before call 4's first try finished):
# shard 1 less the 433 tests call 2 finished (shard1-done.args: one --deselect per test).
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0 FLASHTILE_TEST_GPUS=1 FLASHTILE_TEST_SHARD=1/2 \
  FLASHTILE_TEST_SHARD_TIMES=docs/results/gpu-test-times.tsv FLASHTILE_TEST_TIMES=$OUT/times.tsv
set -f; mapfile -t skip < docs/results/2026-12-03-s36-call4/shard1-done.args
timeout -s INT -k 20 ${TESTS_TIMEOUT:-230} python3 -m pytest tests -q -rfEs -n 16 -p no:cacheprovider \
  --timeout 200 --timeout-method thread "${skip[@]}" 2>&1 | tee $OUT/rest.log | tail -15
