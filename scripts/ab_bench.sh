# Sourced by prepared device-call scripts (docs/results/*/call.sh): defines
#   ab_bench NAME BUDGET ENVS BENCH-ARGS
# one `scripts/gpu_session.sh ab` step into $OUT/NAME: two alternating rounds of main's tree
# against each variant of ENVS (`;`-separated, see the ab step), timing
# `flashtile bench --providers flashtile --kernel-times BENCH-ARGS`, with no run started past
# BUDGET seconds; then the step's table (box-drawing lines left out) and the time since $T0.
# AB_TIMEOUT / AB_COMPILE_S (default 40 / 30 s) limit each run and a variant's first one.
ab_bench() {
  mkdir -p "$OUT/$1"
  (OUT=$OUT/$1 AB_BUDGET=$2 AB_ROUNDS=2 AB_TIMEOUT=${AB_TIMEOUT:-40} \
    AB_COMPILE_S=${AB_COMPILE_S:-30} AB_ENVS="$3" \
    AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --kernel-times $4" \
    bash scripts/gpu_session.sh ab > /dev/null 2>&1)
  grep -v "^[│-]" "$OUT/$1/ab.log" | head -30; echo "($1 done at $((SECONDS - T0)) s)"
}
