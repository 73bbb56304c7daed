# Session 49's first call (CALL_S, default 540 s): the 29 forward matrix cases no run has named as
# passed (session 48's list) and --power's GPU test, -v, junit XML, the tuner off (~150 s); then an
# A/B of the tile-level forward at d=64 causal 512/1k (the Gluon forward leaves these points to it)
# with more programs an SM: main (the pinned 64x64/4w/3s: 127 registers, 56 KB, four programs an SM)
# against 64x32/4w/3s (95 registers, 32 KB: five), 64x32/4w/3s at 80 registers (six; ptxas
# serialises its wgmma), 64x64/4w/2s at 96 registers (five; 16 B spilled, serialised); cuDNN in
# every run, kernel sums, 2 rounds.
export PYTHONPATH=$PWD/src FLASHTILE_AUTOTUNE=0; T0=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 150 python3 -m pytest -v -rf -n 16 -p no:cacheprovider --junitxml=$OUT/matrix.xml \
  tests/test_bench_power.py::test_power_on_gpu $(cat docs/results/2026-12-07-s48-call3/unnamed.txt) \
  > $OUT/matrix.log 2>&1; echo "pytest rc $?"
grep -v Warning $OUT/matrix.log | grep -E "^FAILED|^ERROR" | head
echo "passed $(grep -c ' PASSED' $OUT/matrix.log), failed $(grep -c ' FAILED' $OUT/matrix.log)"
P="FLASHTILE_FWD_BLOCK_M=64 FLASHTILE_FWD_WARPS=4"
AB_BUDGET=$((${CALL_S:-540} - (SECONDS - T0))) AB_ROUNDS=2 AB_TIMEOUT=80 AB_COMPILE_S=40 \
  AB_ENVS="$P FLASHTILE_FWD_BLOCK_N=32 FLASHTILE_FWD_STAGES=3;$P FLASHTILE_FWD_BLOCK_N=32 FLASHTILE_FWD_STAGES=3 FLASHTILE_FWD_MAXNREG=80;$P FLASHTILE_FWD_BLOCK_N=64 FLASHTILE_FWD_STAGES=2 FLASHTILE_FWD_MAXNREG=96" \
  AB_CMD="python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd --headdims 64 --seqlens 512,1k --causal yes --kernel-times" \
  bash scripts/gpu_session.sh ab > /dev/null 2>&1
tail -40 $OUT/ab.log
echo "elapsed $((SECONDS - T0)) s"
