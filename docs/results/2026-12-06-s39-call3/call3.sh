# Session 39, call 3: d=64's one pass in the serial order at 128 queries per tile made the
# default (bwd_hopper.serial). (1) The GPU tests of the files that run the d=64 backward
# through the Gluon kernels (gradients against float64, NaN-poisoned): bwd_hopper, fwd_hopper,
# plans, varlen, sdpa. (2) d=64 fwd+bwd against cuDNN, 512..16k, both masks, 2 interleaved
# rounds, with kernel sums (bf16).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS="tests/test_bwd_hopper.py tests/test_fwd_hopper.py tests/test_plans.py tests/test_varlen.py tests/test_sdpa.py" \
  TEST_PROCS=16 TESTS_TIMEOUT=230 bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
tail -4 $O/t.log
timeout 150 python3 -m flashtile bench --providers flashtile,cudnn --mode fwdbwd --headdims 64 \
  --causal both --seqlens 512,1k,2k,4k,8k,16k --kernel-times --rounds 2 --out $O/bench \
  > $O/bench.log 2>&1
grep -E "│|geomean|WRONG|spread" $O/bench.log | tail -20
tar czf $O/tests.tgz -C $O t t.log && rm -rf $O/t $O/t.log
