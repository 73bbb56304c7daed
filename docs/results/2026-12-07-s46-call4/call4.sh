# Session 46, call 4 (inline on the warm machine after calls 1-3, 418 s of device time left):
# the d=64 unmasked backward alone at 4k/16k, default against the persistent grid and against
# dQ reduced late, two alternating rounds (gpu_session.sh ab).
export OUT; AB_MODE=bwd AB_HEADDIMS=64 AB_SEQLENS=4k,16k AB_CAUSAL=no AB_ROUNDS=2 AB_BUDGET=300 \
  AB_ENVS="FLASHTILE_GLUON_BWD_PERSISTENT=1;FLASHTILE_GLUON_BWD_DQ_LATE=1" \
  timeout 340 bash scripts/gpu_session.sh ab 2>&1 | tail -30
