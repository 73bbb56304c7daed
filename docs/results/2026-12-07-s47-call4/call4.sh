# Session 47's fourth call (CALL_S, default 440 s, at most): the Gluon forward's SOLO layout (one consumer per
# CTA, two CTAs an SM; opt-in FLASHTILE_GLUON_FWD_SOLO=1) on the GPU: its bf16 tests (outputs
# NaN-poisoned, gradients, both S_0 schedules), then an A/B of the forward at 512/1k, d=64/128,
# both masks: main against SOLO with the Gluon forward forced (FLASHTILE_GLUON_FWD=1: d=64 causal
# up to 2k runs the tile-level forward by default), cuDNN in every run, kernel sums, 2 rounds.
export PYTHONPATH=$PWD/src; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 100 python3 -m pytest -q -rf -n 8 -p no:cacheprovider tests/test_fwd_hopper.py \
  -k "solo and (bf16 or launch)" > $OUT/solo-tests.log 2>&1; echo "tests rc $?"
grep -E "^FAILED|^ERROR" $OUT/solo-tests.log | head; tail -2 $OUT/solo-tests.log
AB_BUDGET=$((${CALL_S:-440} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=100 AB_COMPILE_S=50 \
  AB_ENVS="FLASHTILE_GLUON_FWD=1 FLASHTILE_GLUON_FWD_SOLO=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --headdims 64,128 --seqlens 512,1k --causal both --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -40 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
