# Prepared in session 54 for the next session's first device call (~330 s).
# 1. Why the transposed dK/dV kernel's claimed grid is 12% / 8% slower at d=64 causal 2k (bf16
#    / fp16, session 54 call 2), where its fixed turn on the same grid had cost 3.6%: Nsight
#    Compute's stall samples per SASS instruction for the default (one program per item) and
#    the claimed build (FLASHTILE_GLUON_BWD_DYNAMIC=1). Offline both claimed and fixed-turn
#    builds spill ~416 B with 40 LDL / 26 STL in the first tile loop (the default: 212 B, none
#    in that loop), so the difference to look for is at the item boundary: the consumers'
#    read of the claim (a barrier and a cross-warp reduction) and the loader's atomic.
# 2. Which half is the cost: the same grid in a fixed turn (FLASHTILE_GLUON_BWD_PERSISTENT=1,
#    3.6% / 2.2% slower at 2k / 4k when last measured, an older kernel) beside the claims, same
#    run, d=64 causal 2k/4k bf16: if the fixed turn is now as slow, the grid's build (K/V
#    double-buffered, the spills) is the cost, not the claims.
#   export OUT; CALL_S=330 bash docs/results/2026-12-07-s54-next/call.sh
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
for v in 0 1; do
  (export FLASHTILE_GLUON_BWD_DYNAMIC=$v; OUT=$OUT/claims$v; mkdir -p $OUT
   STALL_POINTS="64:2048:causal" STALL_MODE=fwdbwd STALL_KERNEL="dkdv" STALL_PROVIDERS=flashtile \
   STALL_TIMEOUT=80 STALL_TOP=30 timeout 100 bash scripts/gpu_session.sh stallsrc)
done
mkdir -p $OUT/ab
(OUT=$OUT/ab AB_BUDGET=$(( ${CALL_S:-330} - (SECONDS - T0) - 10 )) AB_ROUNDS=2 AB_TIMEOUT=40 \
  AB_COMPILE_S=30 AB_ENVS="FLASHTILE_GLUON_BWD_DYNAMIC=1;FLASHTILE_GLUON_BWD_PERSISTENT=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwdbwd --headdims 64 --seqlens 2k,4k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1)
grep -v "^[│-]" $OUT/ab/ab.log | head -30
ls -l $OUT $OUT/claims*
echo "elapsed $((SECONDS - T0)) s"
