# Prepared in session 52 for the next session's first device call (~330 s):
# 1. d=64 in the rows kernel (FLASHTILE_GLUON_BWD_ROWS=1, opt-in since session 24 at 10-18%
#    slower than the transposed kernel; the rows kernel has since gained the masked-tile skip,
#    rotation and, in session 52, dS under dV: 0.92-0.99x its time at d=128).
#    Same-run A/B, one-pass points only (d=64 causal up to 1k runs two passes either way).
# 2. Where the d=128 causal backward waits, per SASS instruction (session 52's archive was lost):
#    the rows kernel against cuDNN's bprop at 2k, the archive kept under $OUT.
#   export OUT; CALL_S=330 bash docs/results/2026-12-07-s52-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
AB_BUDGET=200 AB_ROUNDS=2 AB_TIMEOUT=50 AB_COMPILE_S=40 AB_ENVS="FLASHTILE_GLUON_BWD_ROWS=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwdbwd --headdims 64 --seqlens 2k,8k,16k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
grep -A10 "^flashtile, µs" $OUT/ab.log
STALL_POINTS="128:2048:causal" STALL_MODE=fwdbwd STALL_KERNEL="dkdv|bprop" STALL_TIMEOUT=60 \
  STALL_TOP=30 timeout $(( ${CALL_S:-330} - (SECONDS - T0) - 5 )) bash scripts/gpu_session.sh stallsrc
ls -l $OUT                          # (stallsrc.tgz: gpu_session.sh writes it; leave it be)
echo "elapsed $((SECONDS - T0)) s"
