# Session 50, call 4: d=64 causal GQA per query head from 2k by default (bwd_hopper.expands):
# the whole of test_bwd_hopper.py (its new default test among them) and the rows kernel's rule
# tests on the GPU, then GQA 8:1's forward+backward against cuDNN at d=64/128, both masks.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 240 python3 -m pytest -v -rf -n 8 -p no:cacheprovider --junitxml=$OUT/tests.xml \
  tests/test_bwd_hopper.py tests/test_bwdrows_hopper.py -k "not test_rows_layout" > $OUT/tests.log 2>&1
echo "tests rc $?: passed $(grep -c ' PASSED' $OUT/tests.log), failed $(grep -c ' FAILED' $OUT/tests.log), skipped $(grep -c ' SKIPPED' $OUT/tests.log)"
grep -E "^FAILED|^ERROR" $OUT/tests.log | head
timeout 200 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd \
  --headdims 64,128 --gqa 8 --seqlens 1k,2k,4k,16k --causal both --kernel-times --out $OUT/gqa > $OUT/gqa.log 2>&1
tail -22 $OUT/gqa.log
echo "elapsed $((SECONDS - T0)) s"
