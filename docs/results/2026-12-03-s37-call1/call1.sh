# Session 37, call 1 (~420 s). (1) Session 36's prepared preprocess call
# (docs/experiments/s36-next-gpu-call-pre.sh): the backward's preprocess grid with a row block's
# heads as neighbouring programs (FLASHTILE_BWD_PRE_HEADS_FIRST=1, opt-in, bitwise-equal on the
# CPU): its GPU tests, then fwd+bwd kernel sums against main, d=64/128, both masks, 512/2k/8k,
# 2 alternating rounds. Prediction: -10 to -15 us a step at every length (-2% to -3% at 512,
# under -0.5% at 8k). (2) Session 28's open question: where the d=64 causal backward's warps
# wait (0.89-0.91x cuDNN from 2k): Nsight Compute stall samples per SASS instruction at 4k,
# ours (_dkdv_hopper_kernel) and cuDNN's (bprop) backward kernels only.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS=tests/test_kernels.py PYTEST_K=preprocess_heads_first TEST_PROCS=16 \
  TESTS_TIMEOUT=150 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
( OUT=$O/p; AB_ROUNDS=2 AB_BUDGET=260 AB_TIMEOUT=60 AB_COMPILE_S=20 \
  AB_ENVS="FLASHTILE_BWD_PRE_HEADS_FIRST=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --kernel-times --headdims 64,128 --causal both --seqlens 512,2k,8k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
( OUT=$O/s; mkdir -p $OUT; STALL_POINTS="64:4096:causal" STALL_MODE=fwdbwd STALL_TIMEOUT=100 \
  STALL_KERNEL="dkdv|bprop" STALL_TOP=25 bash scripts/gpu_session.sh stallsrc ) > $O/s.log 2>&1
tail -4 $O/t.log; tail -14 $O/p.log; tail -20 $O/s.log
