# Prepared in session 54 for the next session's first device call (~200 s).
# 1. Why the transposed dK/dV kernel's claimed grid is 12% / 8% slower at d=64 causal 2k (bf16
#    / fp16, session 54 call 2), where its fixed turn on the same grid had cost 3.6%: Nsight
#    Compute's stall samples per SASS instruction for the default (one program per item) and
#    the claimed build (FLASHTILE_GLUON_BWD_DYNAMIC=1). Offline both claimed and fixed-turn
#    builds spill ~416 B with 40 LDL / 26 STL in the first tile loop (the default: 212 B, none
#    in that loop), so the difference to look for is at the item boundary: the consumers'
#    read of the claim (a barrier and a cross-warp reduction) and the loader's atomic.
#   export OUT; CALL_S=200 bash docs/results/2026-12-07-s54-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
for v in 0 1; do
  (export FLASHTILE_GLUON_BWD_DYNAMIC=$v; OUT=$OUT/claims$v; mkdir -p $OUT
   STALL_POINTS="64:2048:causal" STALL_MODE=fwdbwd STALL_KERNEL="dkdv" STALL_PROVIDERS=flashtile \
   STALL_TIMEOUT=80 STALL_TOP=30 timeout 100 bash scripts/gpu_session.sh stallsrc)
done
ls -l $OUT $OUT/claims*
echo "elapsed $((SECONDS - T0)) s"
