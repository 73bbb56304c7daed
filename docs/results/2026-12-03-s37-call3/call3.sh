# Session 37, call 3 (~400 s): S_1 before an item's first softmax where S_0 runs ahead
# (FLASHTILE_GLUON_FWD_EARLY_S1=1 with NEXT_S0, fwd_hopper._early_tiles; opt-in, unmeasured).
# (1) The whole Gluon-forward test file with the switch on for every test that does not set it
# (every causal d=64/128 case then takes the new item start) and the new tests
# (test_early_s1_with_s0_ahead: items of 1/2/3+ tiles, 128/64/32-key tiles, both masks, bf16
# and fp16, NaN-poisoned outputs and gradients against float64). (2) Forward kernel sums
# against main, causal d=64/128 at 512-16k, 3 alternating rounds (d=64 at 512/1k runs the
# tile-level forward: a control that must read level). Prediction: d=128 causal -1% to -4% at
# 512/1k, level (within 1%) from 4k; d=64 causal 2k -1% to -2%.
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; FLASHTILE_GLUON_FWD_EARLY_S1=1 PYTEST_ARGS=tests/test_fwd_hopper.py TEST_PROCS=16 \
  TESTS_TIMEOUT=170 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
( OUT=$O/p; AB_ROUNDS=3 AB_BUDGET=210 AB_TIMEOUT=45 AB_COMPILE_S=30 \
  AB_ENVS="FLASHTILE_GLUON_FWD_EARLY_S1=1" \
  AB_CMD="python3 -m flashtile bench --providers flashtile --no-plot --mode fwd --kernel-times --headdims 64,128 --causal yes --seqlens 512,1k,2k,4k,16k" \
  bash scripts/gpu_session.sh ab ) > $O/p.log 2>&1
tail -6 $O/t.log; tail -14 $O/p.log
