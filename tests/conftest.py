"""Test set-up: fixed seeds, NaN-poisoned kernel outputs, untuned kernel configs, GPU tests
skipped (and counted as skipped) without a GPU."""

import collections
import os

# Kernel launchers fill their outputs with NaN before the launch when this is set, so an element
# a kernel forgot to write fails the comparison instead of passing on leftover memory.
os.environ.setdefault("FLASHTILE_POISON", "1")

# The tests check each kernel's first fitting config rather than time every config first: on a
# GPU with the tuner on, a forward matrix case took ~190 s of a worker (docs/perf.md, session 48).
# Tests of the tuner itself set FLASHTILE_AUTOTUNE=1 themselves; set it outside to test the picks.
os.environ.setdefault("FLASHTILE_AUTOTUNE", "0")

# FLASHTILE_TEST_GPUS=N (N > 1) spreads pytest-xdist's workers over N GPUs, worker i on GPU
# i % N (`scripts/gpu_session.sh alltests` on a machine with several). It must be set before
# CUDA starts, i.e. before torch is asked about GPUs below.
_gpus, _worker = os.environ.get("FLASHTILE_TEST_GPUS", ""), os.environ.get("PYTEST_XDIST_WORKER")
if _gpus.isdigit() and int(_gpus) > 1 and _worker and _worker.startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % int(_gpus))

import pytest  # noqa: E402
import torch  # noqa: E402

# Without a GPU the Triton kernels run under Triton's interpreter. The flag must be set before
# triton is imported (torch does not import it), i.e. before flashtile.kernels is.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _fresh_launch_plans():
    """Each test records its own launch plans: a test that patches a kernel module (the
    decode split merge width, say) must not replay a plan recorded under another test's
    patch."""
    from flashtile.kernels import plans
    plans.clear()
    yield


@pytest.fixture(params=["triton", "torch"])
def backend(request):
    """Run a test once on the Triton kernels (interpreted without a GPU) and once on the torch
    path."""
    import flashtile
    flashtile.set_backend(request.param)
    yield request.param
    flashtile.set_backend(None)


def shard_files(weights: dict[str, float], n: int) -> list[set[str]]:
    """Test files spread over ``n`` shards of about equal weight (``weights``: file -> tests
    collected, or seconds, :func:`file_weights`), heaviest first onto the lightest shard.
    Whole files stay together: a file's tests share their kernels' compiles, which dominate a
    GPU run."""
    shards: list[set[str]] = [set() for _ in range(n)]
    totals = [0.0] * n
    for name in sorted(weights, key=lambda f: (-weights[f], f)):
        lightest = totals.index(min(totals))
        shards[lightest].add(name)
        totals[lightest] += weights[name]
    return shards


def read_test_times(path: str) -> dict[str, float]:
    """Seconds per test file from a log that ``FLASHTILE_TEST_TIMES`` wrote (tab-separated:
    test id, phase, seconds, outcome; a run cut off still leaves its finished lines)."""
    seconds: dict[str, float] = collections.defaultdict(float)
    with open(path) as log:
        for line in log:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 4:
                seconds[fields[0].split("::")[0]] += float(fields[2])
    return dict(seconds)


def file_weights(counts: dict[str, int], seconds: dict[str, float] | None) -> dict[str, float]:
    """Each file's weight for :func:`shard_files`: its seconds in an earlier run where it has
    them (``seconds``, :func:`read_test_times`), else its test count times the measured
    files' mean seconds per test; only counts without ``seconds``."""
    if not seconds:
        return {f: float(c) for f, c in counts.items()}
    timed = [f for f in counts if f in seconds]
    per_test = (sum(seconds[f] for f in timed) / max(1, sum(counts[f] for f in timed))
                if timed else 1.0)
    return {f: seconds[f] if f in seconds else counts[f] * per_test for f in counts}


def _keep_shard(config, items) -> None:
    """``FLASHTILE_TEST_SHARD=i/n`` (1 <= i <= n) keeps the i-th of n shards of the collected
    tests (:func:`shard_files`) and reports the rest as deselected: the whole suite on one
    GPU in n device calls (`scripts/gpu_session.sh alltests`), each within a call's limit.
    ``FLASHTILE_TEST_SHARD_TIMES=log`` balances them by an earlier run's seconds per file
    (:func:`file_weights`) instead of test counts."""
    spec = os.environ.get("FLASHTILE_TEST_SHARD", "")
    if not spec:
        return
    i, _, n = spec.partition("/")
    if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise pytest.UsageError(f"FLASHTILE_TEST_SHARD must be i/n with 1 <= i <= n (e.g. 1/2), "
                                f"got {spec!r}")
    times = os.environ.get("FLASHTILE_TEST_SHARD_TIMES", "")
    if times and not os.path.isfile(times):
        raise pytest.UsageError(f"FLASHTILE_TEST_SHARD_TIMES={times!r}: no such file (a log "
                                f"written through FLASHTILE_TEST_TIMES)")
    files = [item.nodeid.split("::")[0] for item in items]
    weights = file_weights(collections.Counter(files), read_test_times(times) if times else None)
    keep = shard_files(weights, int(n))[int(i) - 1]
    kept = [item for item, f in zip(items, files) if f in keep]
    config.hook.pytest_deselected(items=[item for item, f in zip(items, files) if f not in keep])
    items[:] = kept


def pytest_runtest_logreport(report):
    """``FLASHTILE_TEST_TIMES=log``: every test phase's seconds appended to ``log`` as it
    ends (by the controlling process only, under pytest-xdist), so that a run its limit cuts
    off still tells how long each file took (:func:`read_test_times`)."""
    path = os.environ.get("FLASHTILE_TEST_TIMES", "")
    if not path or _worker:
        return
    with open(path, "a") as log:
        log.write(f"{report.nodeid}\t{report.when}\t{report.duration:.3f}\t{report.outcome}\n")


def pytest_collection_modifyitems(config, items):
    _keep_shard(config, items)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
