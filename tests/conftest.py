"""Test set-up: fixed seeds, NaN-poisoned kernel outputs, GPU tests skipped (and counted as
skipped) without a GPU."""

import collections
import os

# Kernel launchers fill their outputs with NaN before the launch when this is set, so an element
# a kernel forgot to write fails the comparison instead of passing on leftover memory.
os.environ.setdefault("FLASHTILE_POISON", "1")

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


def shard_files(counts: dict[str, int], n: int) -> list[set[str]]:
    """Test files spread over ``n`` shards of about equal test counts (``counts``: file ->
    tests collected), largest first onto the lightest shard. Whole files stay together: a
    file's tests share their kernels' compiles, which dominate a GPU run."""
    shards: list[set[str]] = [set() for _ in range(n)]
    totals = [0] * n
    for name in sorted(counts, key=lambda f: (-counts[f], f)):
        lightest = totals.index(min(totals))
        shards[lightest].add(name)
        totals[lightest] += counts[name]
    return shards


def _keep_shard(config, items) -> None:
    """``FLASHTILE_TEST_SHARD=i/n`` (1 <= i <= n) keeps the i-th of n shards of the collected
    tests (:func:`shard_files`) and reports the rest as deselected: the whole suite on one
    GPU in n device calls (`scripts/gpu_session.sh alltests`), each within a call's limit."""
    spec = os.environ.get("FLASHTILE_TEST_SHARD", "")
    if not spec:
        return
    i, _, n = spec.partition("/")
    if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise pytest.UsageError(f"FLASHTILE_TEST_SHARD must be i/n with 1 <= i <= n (e.g. 1/2), "
                                f"got {spec!r}")
    files = [item.nodeid.split("::")[0] for item in items]
    keep = shard_files(collections.Counter(files), int(n))[int(i) - 1]
    kept = [item for item, f in zip(items, files) if f in keep]
    config.hook.pytest_deselected(items=[item for item, f in zip(items, files) if f not in keep])
    items[:] = kept


def pytest_collection_modifyitems(config, items):
    _keep_shard(config, items)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
