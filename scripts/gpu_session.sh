#!/usr/bin/env bash
# One call on the GPU machine: environment, GPU tests, benchmarks. Logs/JSON land in $OUT.
#   bash scripts/gpu_session.sh [STEP ...]
#   steps: env alltests pytest diagnose tests smoke core headdims full long ledger sparse features quick
#          bwdsweep plans outlier gluon gluonfwd gluonbwd gluonsweep
#          gluonfwdsweep ab branches stalls stallsrc idle
# Carry .whl (pytest, rich, matplotlib... as wheels) when the machine lacks them.
# Branches in the same call: `git archive BRANCH | tar -x -C .branches/BRANCH` (git-ignored)
# and `git rev-parse --short BRANCH > .branches/BRANCH/COMMIT`, carry .branches, and run the
# step `branches` (BRANCH_STEPS: the steps each branch runs; .branches/BRANCH/RUN: its own).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
STEPS=${*:-env tests}
# pytest's workers spread over this machine's GPUs (tests/conftest.py)
export FLASHTILE_TEST_GPUS=${FLASHTILE_TEST_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}

# Install only the carried wheels whose module is missing (never shadow the image's packages).
missing=()
for pair in pytest:pytest pluggy:pluggy iniconfig:iniconfig hypothesis:hypothesis \
            sortedcontainers:sortedcontainers rich:rich markdown_it:markdown_it_py mdurl:mdurl \
            pygments:pygments tqdm:tqdm matplotlib:matplotlib contourpy:contourpy cycler:cycler \
            fontTools:fonttools kiwisolver:kiwisolver pyparsing:pyparsing dateutil:python_dateutil \
            six:six PIL:pillow xdist:pytest_xdist execnet:execnet; do
  mod=${pair%%:*}; whl=${pair##*:}
  python3 -c "import $mod" 2>/dev/null || missing+=(.whl/${whl}-*.whl)
done
if [ ${#missing[@]} -gt 0 ] && [ -d .whl ]; then
  echo "installing carried wheels: ${missing[*]}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    ${missing[@]} && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

# The test steps: each test phase's seconds to $OUT/times.tsv as it ends (tests/conftest.py:
# a run its limit cuts off still tells each file's time; FLASHTILE_TEST_SHARD_TIMES=that file
# balances alltests' shards by it), and with pytest-timeout (the image has it) a test that
# outlasts TEST_EACH_TIMEOUT seconds (default 240; compiles take up to ~40 s) fails with its
# stacks and its worker is replaced, instead of a hung kernel holding a worker to the call's
# end (session 33 lost two calls' tests so).
test_opts=()
python3 -c "import pytest_timeout" 2>/dev/null \
  && test_opts=(--timeout "${TEST_EACH_TIMEOUT:-240}" --timeout-method thread)

for step in $STEPS; do
  echo "=== step: $step ($(date +%T))"
  case $step in
    env)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
      python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())"
      git rev-parse --short HEAD 2>/dev/null || true ;;
    alltests) # the whole suite on the GPU, in parallel processes (compiles dominate; 520 s with
      # 16 processes cut pytest's summary off in session 18, ~1,210 tests). On a machine with
      # several GPUs the workers spread over them (tests/conftest.py), one process per core.
      # On one GPU the suite (~1,600 tests) outlasts a device call: FLASHTILE_TEST_SHARD=1/2,
      # then =2/2 in the next call, runs half the test files each (tests/conftest.py). The
      # shards are balanced by test counts, not time (in session 32 shard 1 took 178 s and
      # shard 2 outlasted 480 s), unless FLASHTILE_TEST_SHARD_TIMES names an earlier run's
      # $OUT/times.tsv: by default docs/results/gpu-test-times.tsv, the whole suite's seconds
      # in session 40 (both shards' logs: an H100, 8 processes; refresh it when the suite
      # grows). The shell shows pytest's summary. At TESTS_TIMEOUT pytest gets SIGINT, so
      # that it still prints its counts and the summary (SIGKILL 20 s later).
      [ -f docs/results/gpu-test-times.tsv ] \
        && export FLASHTILE_TEST_SHARD_TIMES=${FLASHTILE_TEST_SHARD_TIMES:-docs/results/gpu-test-times.tsv}
      FLASHTILE_TEST_TIMES="$OUT/times.tsv" FLASHTILE_AUTOTUNE=0 timeout -s INT -k 20 ${TESTS_TIMEOUT:-560} \
        python3 -m pytest tests -q -rfEs "${test_opts[@]}" \
        -n ${TEST_PROCS:-$(nproc)} -p no:cacheprovider --durations=0 --durations-min=1 2>&1 \
        | tee "$OUT/alltests.log" | grep -v -E "^[0-9.]+s (call|setup|teardown) " | tail -30 ;;
    pytest) # chosen test files and filter: PYTEST_ARGS="tests/a.py tests/b.py" PYTEST_K="dropout or rng"
      FLASHTILE_TEST_TIMES="$OUT/times.tsv" FLASHTILE_AUTOTUNE=0 timeout -s INT -k 20 ${TESTS_TIMEOUT:-330} \
        python3 -m pytest -q -rfEs -p no:cacheprovider "${test_opts[@]}" \
        -n ${TEST_PROCS:-8} ${PYTEST_ARGS:-tests/test_kernels.py} ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 \
        | tee "$OUT/pytest.log" | tail -15 ;;
    tests)
      FLASHTILE_AUTOTUNE=0 python3 -m pytest tests/test_kernels.py -q -x -p no:cacheprovider --durations=5 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
    smoke)  # one GPU pass over every fused feature (fp16/bf16), compile-light
      export FLASHTILE_AUTOTUNE=0
      for spec in "tests/test_kernels.py -k test_features" "tests/test_dropout.py" \
                  "tests/test_varlen.py -k not bad" "tests/test_sdpa.py -k gqa or gradient" \
                  "tests/test_flex_kernels.py -k causal or document or relpos or alibi" \
                  "tests/test_kvcache.py"; do
        file=${spec%% -k *}; filter=""; [ "$file" != "$spec" ] && filter=${spec#* -k }
        echo "--- $file ${filter:+(-k $filter)}"
        timeout ${SMOKE_TIMEOUT:-40} python3 -m pytest -q -x -p no:cacheprovider "$file" ${filter:+-k "$filter"} 2>&1 \
          | tee -a "$OUT/smoke.log" | tail -3
      done ;;
    sparse) # Figure 2 right: block-sparse fwd+bwd time vs density (b16 h8 N4096 d64, bf16)
      python3 - <<'PY' 2>&1 | tee "$OUT/sparse.log"
import json, os
from flashtile.ledger.model import Workload
from flashtile.ledger.paper import DENSITIES, SPARSE_WORKLOAD, FLEX_BLOCK_SPARSE_MS, measure_block_sparse
rows = measure_block_sparse(Workload(**SPARSE_WORKLOAD, dtype_bytes=2), DENSITIES, "bf16")
for r in rows:
    anchor = FLEX_BLOCK_SPARSE_MS.get(round(r["density"], 2))
    print(f"density {r['density']:.2f} (actual {r['actual_density']:.3f}): {r['ms']:.3f} ms, "
          f"{r['ms'] / rows[0]['ms']:.2f}x dense; FlexAttention anchor {anchor} ms")
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "sparse.json"), "w"), indent=1)
PY
      ;;
    features) # issues 3/4/5 targets: fusion, varlen, block-sparse vs compiled flex, decode
      python3 scripts/feature_bench.py --part ${FEATURES_PARTS:-fusion,varlen,sparse,decode} --budget-s ${FEATURES_BUDGET:-500} \
        --out "$OUT/features" 2>&1 | tee "$OUT/features.log" ;;
    bwdsweep) # backward: atomic vs two-pass dQ x tile configs, vs cuDNN (scripts/bwd_sweep.py)
      python3 scripts/bwd_sweep.py --headdims ${SWEEP_HEADDIMS:-64,128} \
        --seqlens ${SWEEP_SEQLENS:-1024,4096,16384} --warm-procs ${SWEEP_WARM:-6} \
        --out "$OUT/bwd-sweep" 2>&1 | tee "$OUT/bwd-sweep.log" | tail -40 ;;
    diagnose) # where the time goes: sparse vs dense kernels, decode split counts, dropout
      python3 scripts/diagnose.py --what ${DIAG_WHAT:-sparse,decode,dropout} --out "$OUT" 2>&1 \
        | tee "$OUT/diagnose.log" ;;
    plans) # host time per call with launch plans off, then on (real launches; host-bound calls)
      for what in ${PLANS_WHAT:-fwd fwdbwd decode flex varlen}; do
        for p in 0 1; do
          # (both lines: host time, and wall time until the GPU finished, which shows a call
          # that is device-bound)
          echo "$what plans=$p: $(FLASHTILE_LAUNCH_PLANS=$p timeout 60 python3 scripts/host_overhead.py \
            --gpu --what $what --calls 200 2>&1 | tail -2 | tr '\n' ' ')"
        done
      done 2>&1 | tee "$OUT/plans.log" ;;
    idle) # where a timed fwd+bwd leaves the GPU idle: the host's time per iteration, syncs,
      # the gaps inside a call (scripts/idle_probe.py); IDLE_POINTS="d:seqlen:causal ..."
      timeout ${IDLE_TIMEOUT:-300} python3 scripts/idle_probe.py --out "$OUT/idle" \
        --points "${IDLE_POINTS:-128:512:1 128:512:0 64:512:1 128:1024:1}" 2>&1 \
        | grep -v Warning | tee "$OUT/idle.log" ;;
    outlier) # session 8's d=128 non-causal fwd+bwd at 1k (241 TFLOP/s there; not reproduced in
      # session 9: 312.6), with each point's kernel configs in the bench JSON
      python3 -m flashtile bench --seqlens 512,1k,2k --headdims 128 --causal no --mode fwdbwd \
        --providers flashtile,cudnn --no-plot --out "$OUT/bench-outlier" 2>&1 \
        | tee "$OUT/bench-outlier.log" | tail -12 ;;
    gluon) # the Gluon kernels' GPU tests (kernels/*_hopper.py), under a short limit (a kernel
      # that hangs must not eat the call)
      FLASHTILE_AUTOTUNE=0 timeout ${GLUON_TEST_TIMEOUT:-240} python3 -m pytest -q -x -n 6 \
        -p no:cacheprovider tests/test_fwd_hopper.py tests/test_bwd_hopper.py \
        tests/test_dq_hopper.py 2>&1 \
        | tee "$OUT/gluon-tests.log" | tail -5 ;;
    gluonfwd|gluonbwd) # same-run comparisons against cuDNN: forward tile-level / default
      # (Gluon where it measured ahead, its grid by its rule) / Gluon everywhere with one
      # program per item / with one per SM (GLUON_FWD_VARIANTS overrides); forward+backward
      # with the tile-level dK/dV / default / the Gluon dK/dV with one program per item
      # (GLUON_BWD_VARIANTS overrides; "name:A=1+B=2" sets several variables)
      B="python3 -m flashtile bench --providers flashtile,cudnn --no-plot
         --headdims ${GLUON_HEADDIMS:-64,128} --seqlens ${GLUON_SEQLENS:-1k,4k,16k}
         --causal ${GLUON_CAUSAL:-both}"
      if [ $step = gluonfwd ]; then mode=fwd
        variants=(${GLUON_FWD_VARIANTS:-tile:FLASHTILE_GLUON_FWD=0 auto:
                  item:FLASHTILE_GLUON_FWD=1+FLASHTILE_GLUON_FWD_PERSISTENT=0
                  sm:FLASHTILE_GLUON_FWD=1+FLASHTILE_GLUON_FWD_PERSISTENT=1})
      else mode=fwdbwd
        variants=(${GLUON_BWD_VARIANTS:-tile:FLASHTILE_GLUON_BWD=0 auto: item:FLASHTILE_GLUON_BWD_PERSISTENT=0})
      fi
      for v in "${variants[@]}"; do
        echo "--- $mode ${v%%:*}"
        env $(tr + " " <<< "${v#*:}") timeout ${GLUON_BENCH_TIMEOUT:-170} $B --mode $mode \
          --out "$OUT/gluon-$mode-${v%%:*}" 2>&1 | grep -E "^│ +[0-9]|geomean|WRONG"
      done 2>&1 | tee "$OUT/gluon-$mode.log" ;;
    gluonsweep|gluonfwdsweep) # the Gluon kernels' configs, vs cuDNN in the same runs; every
      # config compiles clean offline (scripts/inspect_kernels.py --gluon). gluonsweep: dK/dV
      # (keys per consumer, queries per tile, ring slots, registers), backward only;
      # gluonfwdsweep: the forward (rows per consumer, keys per tile, slots, registers)
      if [ $step = gluonsweep ]; then mode=bwd; var=FLASHTILE_GLUON_BWD_CONFIG; flags=
        configs=${SWEEP_CONFIGS:-64:64,64,4,240 64:64,64,2,240 64:64,32,4,240 64:64,64,6,240
                 128:64,32,4,240 128:64,32,2,240 128:64,32,6,240}
      else mode=fwd; var=FLASHTILE_GLUON_FWD_CONFIG; flags=FLASHTILE_GLUON_FWD=1
        configs=${SWEEP_CONFIGS:-64:64,128,4,240 64:64,64,4,240 64:64,128,2,240
                 128:64,64,4,240 128:64,128,2,240 128:64,64,3,240}
      fi
      for v in $configs; do
        echo "--- $mode d=${v%%:*} config ${v#*:}"
        env $flags $var=${v#*:} timeout 120 python3 -m flashtile bench \
          --providers flashtile,cudnn --no-plot --headdims ${v%%:*} --mode $mode \
          --seqlens ${SWEEP_SEQLENS:-4k,16k} --causal both \
          --out "$OUT/$step-d${v%%:*}-$(echo ${v#*:} | tr , -)" 2>&1 | grep -E "^│ +[0-9]|geomean|WRONG"
      done 2>&1 | tee "$OUT/$step.log" ;;
    quick)
      python3 -m flashtile bench --quick --out "$OUT/bench-quick" 2>&1 | tee "$OUT/bench-quick.log" ;;
    core)   # the grid points that steer tuning: d 64/128 x 1k/4k/16k x causal, vs cuDNN and FA2
      python3 -m flashtile bench --seqlens 1k,4k,16k --headdims 64,128 --causal both \
        --mode fwd,fwdbwd --providers flashtile,cudnn,flash --no-plot \
        --out "$OUT/bench-core" 2>&1 | tee "$OUT/bench-core.log" | tail -60 ;;
    headdims) # issue 7's other shapes: d 96/128/256 and GQA 8 at 4k, vs cuDNN (same run)
      python3 -m flashtile bench --seqlens ${HD_SEQLENS:-4k} --headdims 96,128,256 --causal both \
        --mode fwd,fwdbwd --providers flashtile,cudnn --no-plot --out "$OUT/bench-headdims" 2>&1 \
        | tee "$OUT/bench-headdims.log" | tail -30
      python3 -m flashtile bench --seqlens ${HD_SEQLENS:-4k} --headdims 128 --gqa 8 --causal both \
        --mode fwd,fwdbwd --providers flashtile,cudnn --no-plot --out "$OUT/bench-gqa" 2>&1 \
        | tee "$OUT/bench-gqa.log" | tail -20 ;;
    full)   # the issue-7 grid; one head dim per call fits the 10-minute limit (session 8):
      # FULL_HEADDIMS=128, then 64; FULL_ARGS: more bench options (e.g. --kernel-times)
      name=bench-full-d$(echo ${FULL_HEADDIMS:-all} | tr , -)    # (no commas in names)
      python3 -m flashtile bench --full --headdims ${FULL_HEADDIMS:-64,128} \
        --providers flashtile,cudnn,flash ${FULL_ARGS:-} --out "$OUT/$name" 2>&1 \
        | tee "$OUT/$name.log" \
        | tail -80 ;;
    long)
      FLASHTILE_AUTOTUNE=0 python3 scripts/long_sequence.py 2>&1 | tee "$OUT/long.log" ;;
    stalls) # where each kernel's warps wait (Nsight Compute's stall sampling; table by
      # scripts/stall_table.py): STALL_POINTS="d:seqlen[:causal] ..." (16k tokens, nheads
      # 2048/d), one STALL_MODE (fwd | fwdbwd) step of flashtile and of cuDNN each; flashtile's
      # switches (e.g. FLASHTILE_GLUON_FWD=1) pass through the environment
      ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
      csvs=()
      for point in ${STALL_POINTS:-64:4096 64:1024:causal}; do
        IFS=: read -r d n c <<< "$point"
        for provider in flashtile sdpa-cudnn; do
          f="$OUT/stalls-$provider-d$d-$n${c:+-causal}.csv"
          timeout ${STALL_TIMEOUT:-150} "$ncu" --profile-from-start off --clock-control none \
            --section SpeedOfLight --csv --page raw \
            --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
            python3 scripts/pipe_profile.py --provider $provider --mode ${STALL_MODE:-fwd} \
            --d $d --seqlen $n ${c:+--causal} > "$f" 2> "$f.err" || tail -3 "$f.err"
          csvs+=("$f")
        done
      done
      python3 scripts/stall_table.py "${csvs[@]}" 2>&1 | tee "$OUT/stalls.md" ;;
    stallsrc) # where in each kernel the warps wait: Nsight Compute's stall samples per SASS
      # instruction (scripts/stall_sources.py), for the STALL_POINTS of `stalls` and the
      # STALL_PROVIDERS (default: flashtile sdpa-cudnn; cuDNN's SASS is read as well), the
      # kernels whose names match the regex STALL_KERNEL (default: all of the step's); the
      # reports and CSVs in one archive (the device returns at most 8 files)
      ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
      mkdir -p "$OUT/stallsrc"; csvs=()
      for point in ${STALL_POINTS:-64:4096 64:1024:causal}; do
        IFS=: read -r d n c <<< "$point"
        for provider in ${STALL_PROVIDERS:-flashtile sdpa-cudnn}; do
          f="$OUT/stallsrc/$provider-d$d-$n${c:+-causal}"
          timeout ${STALL_TIMEOUT:-150} "$ncu" --profile-from-start off --clock-control none \
            --section SourceCounters --section WarpStateStats --import-source no -f -o "$f" \
            ${STALL_KERNEL:+--kernel-name "regex:$STALL_KERNEL"} \
            python3 scripts/pipe_profile.py --provider $provider --mode ${STALL_MODE:-fwd} \
            --d $d --seqlen $n ${c:+--causal} > "$f.log" 2>&1 || tail -3 "$f.log"
          "$ncu" --import "$f.ncu-rep" --page source --print-source sass --csv > "$f.csv" \
            2>> "$f.log" && csvs+=("$f.csv")
        done
      done
      [ ${#csvs[@]} -gt 0 ] && python3 scripts/stall_sources.py "${csvs[@]}" \
        --top ${STALL_TOP:-15} 2>&1 | tee "$OUT/stallsrc/stallsrc.md" \
        | grep -E "^(## |[0-9]+ instructions|Reasons)"
      tar czf "$OUT/stallsrc.tgz" -C "$OUT" stallsrc && rm -rf "$OUT/stallsrc" ;;
    ledger)
      python3 -m flashtile ledger --paper --measure --ncu --out "$OUT/ledger" 2>&1 | tee "$OUT/ledger.log" ;;
    ab) # same-run A/B in alternating runs, so that drift within a call falls on both sides:
      # AB_CMD (default: the bench, AB_MODE / AB_HEADDIMS / AB_SEQLENS / AB_CAUSAL) once as a
      # discarded warm-up, then AB_ROUNDS rounds alternating the main tree and each
      # .branches/<name> tree; AB_FRESH_CACHE=1 gives each run an empty Triton cache
      # (compiles and autotunes anew: the trees share kernel sources, so they would share
      # autotuning results otherwise); AB_ENVS="A=1 B=2;C=3" adds variants of the main tree
      # run with those variables (e.g. a kernel's switch or config), alternated the same way;
      # AB_BUDGET=S (seconds): no run starts that is expected to end past S (expected: its
      # variant's last run, or the warm-up's compiling run for a variant's first; session 54
      # lost a call's A/B to starting only what the worst case allowed) and none runs past
      # it, so that the table and the archive are still written when the step has to stop
      # early (an outer `timeout` would cut them off with the runs); AB_TIMEOUT=S (default
      # 150) limits one run, plus AB_COMPILE_S (default 60) for a variant's first run
      cmd=${AB_CMD:-python3 -m flashtile bench --providers flashtile,cudnn --no-plot \
        --mode ${AB_MODE:-fwdbwd} --headdims ${AB_HEADDIMS:-128} --seqlens ${AB_SEQLENS:-2k,8k} \
        --causal ${AB_CAUSAL:-both}}
      ab_start=$SECONDS
      echo "--- warm-up (discarded)"
      timeout 150 $cmd --out "$OUT/ab/warm" > /dev/null 2>&1
      declare -A ab_took=()                 # (seconds of each variant's last run)
      ab_took[warm]=$(( SECONDS - ab_start ))
      # one run: in tree $1 (a folder), named $2, with variables $3 ("A=1 B=2", may be empty).
      # A variant's first run also compiles its kernels (the warm-up ran the main tree's
      # only; session 24 lost a variant whose compile outlasted AB_TIMEOUT): it gets
      # AB_COMPILE_S seconds more (default 60), and a fresh cache does every round
      ab_run() {
        local limit=${AB_TIMEOUT:-150}
        if [ "$2" != main ] && { [ "$round" = 1 ] || [ "${AB_FRESH_CACHE:-0}" = 1 ]; }; then
          limit=$(( limit + ${AB_COMPILE_S:-60} ))
        fi
        if [ -n "${AB_BUDGET:-}" ]; then
          local left=$(( AB_BUDGET - (SECONDS - ab_start) ))
          if (( left < 1 || ${ab_took[$2]:-${ab_took[warm]}} > left )); then  # (timeout 0: none)
            echo "--- round $round: $2 not run (AB_BUDGET=$AB_BUDGET s reached)"; return
          fi
          (( left < limit )) && limit=$left
        fi
        echo "--- round $round: $2"
        local started=$SECONDS
        (cd "$1" && export PYTHONPATH="$PWD/src:$PYTHONPATH" ${3:-} \
          && { [ "${AB_FRESH_CACHE:-0}" = 1 ] \
               && export TRITON_CACHE_DIR=/tmp/ab-cache-$round-$2; true; } \
          && timeout $limit $cmd --out "$OUT/ab/$round-$2") 2>&1 \
          | grep -E "^│ +[0-9]|geomean.*cuDNN|WRONG|best config"
        [ "${PIPESTATUS[0]}" = 124 ] && echo "--- round $round: $2 cut at $limit s"
        ab_took[$2]=$(( SECONDS - started ))
        true
      }
      IFS=';' read -ra envs <<< "${AB_ENVS:-}"
      for round in $(seq ${AB_ROUNDS:-2}); do
        for dir in . .branches/*/; do
          [ -d "$dir" ] || continue           # (no branch trees: the main tree alone)
          ab_run "$dir" "$([ "$dir" = . ] && echo main || basename "$dir")"
        done
        for assignments in "${envs[@]}"; do
          ab_run . "env-$(printf %s "$assignments" | tr -c 'A-Za-z0-9.-' '_')" "$assignments"
        done
      done 2>&1 | tee "$OUT/ab.log"
      # (each point by variant and round: kernel sums where the runs had --kernel-times)
      python3 scripts/ab_table.py "$OUT/ab" 2>&1 | tee -a "$OUT/ab.log"
      # (and each kernel of the split alone: a side effect on one kernel shows, session 53)
      python3 scripts/ab_table.py "$OUT/ab" --split 2>&1 | tee -a "$OUT/ab.log"
      # (one archive: the device returns at most 8 files, and each run is a folder of its own)
      tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab" ;;
    branches) # each tree under .branches/ runs its own gpu_session.sh with BRANCH_STEPS
      # (default: gluon gluonfwd), or its own .branches/<name>/RUN (a bash snippet run in
      # the tree, e.g. `GLUON_SEQLENS=1k,4k bash scripts/gpu_session.sh gluon gluonbwd`),
      # output under $OUT/<branch>
      for dir in .branches/*/; do
        name=$(basename "$dir")
        run="bash scripts/gpu_session.sh ${BRANCH_STEPS:-gluon gluonfwd}"
        [ -f "$dir/RUN" ] && run=$(cat "$dir/RUN")
        echo "--- branch $name ($(cat "$dir/COMMIT" 2>/dev/null)): $run"
        (cd "$dir" && export PYTHONPATH="$PWD/src:$PYTHONPATH" OUT="$OUT/$name" && eval "$run")
      done 2>&1 | tee "$OUT/branches.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
