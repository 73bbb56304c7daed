# Session 37, call 5 (~150 s): the new d=128 causal rule (128-key tiles from 1k keys) on the
# GPU: the Gluon forward's whole test file on the new default (causal 1k cases now take the
# wide tiles), then flashtile against cuDNN at d=128 causal 512/1k/2k, fwd and fwd+bwd, call
# times and kernel sums (prediction: the 1k forward 0.94x -> ~0.97x cuDNN by kernels).
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/t; PYTEST_ARGS=tests/test_fwd_hopper.py TEST_PROCS=16 TESTS_TIMEOUT=150 \
  bash scripts/gpu_session.sh pytest ) > $O/t.log 2>&1
timeout 80 python3 -m flashtile bench --providers flashtile,cudnn --no-plot --mode fwd,fwdbwd \
  --kernel-times --headdims 128 --causal yes --seqlens 512,1k,2k --out $O/b > $O/b.log 2>&1
tar czf $O/b.tgz -C $O b && rm -rf $O/b
tail -3 $O/t.log; grep -E "^│ +[0-9]|geomean|WRONG" $O/b.log
