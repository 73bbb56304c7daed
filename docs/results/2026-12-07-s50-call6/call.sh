# Session 50, call 6: GQA 8:1 forward+backward against cuDNN in fp16 (call 4: bf16), d=64/128,
# both masks, 1k-16k, with d=64 causal per query head from 2k by default.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 220 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --dtype fp16 \
  --headdims 64,128 --gqa 8 --seqlens 1k,2k,4k,16k --causal both --kernel-times --out $OUT/gqa > $OUT/gqa.log 2>&1
grep -E "^│ +(64|128) |geomean" $OUT/gqa.log
echo "elapsed $((SECONDS - T0)) s"
