# Session 40, call 1 (session 39's prepared call A): issue 7's whole grid, bf16 and fp16,
# flashtile against SDPA-cuDNN, fwd and fwd+bwd, three interleaved rounds, kernel sums; d=64's
# backward now in the serial order (session 39). The d=128 rows read as the drift control.
export PYTHONPATH=$PWD/src; O=$OUT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for dt in bf16 fp16; do
  timeout 280 python3 -m flashtile bench --providers flashtile,cudnn --mode fwd,fwdbwd \
    --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --headdims 64,128 \
    --rounds 3 --dtype $dt --out $O/$dt > $O/$dt.log 2>&1
  grep -E "geomean|WRONG" $O/$dt.log
done
