"""TunedLaunch: the autotuner decides once per key; later calls launch its choice directly."""

from __future__ import annotations

import torch
import triton

from flashtile.kernels.common import TunedLaunch


class FakeTuner:
    """Records how it was launched; the 'tuning' picks a config from the key argument."""

    arg_names = ["X", "n", "FLAG"]
    keys = ["FLAG", "n"]

    def __init__(self):
        self.calls = []
        self.best_config = None
        tuner = self

        class Fn:
            def __getitem__(self, grid):
                def run(*args, **kwargs):
                    tuner.calls.append(("direct", grid, args, kwargs))
                return run
        self.fn = Fn()

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.best_config = triton.Config({"BLOCK": 16 * kwargs["FLAG"]}, num_warps=4)
            self.calls.append(("tuned", grid, args, kwargs))
        return run


def test_tunes_once_per_key_then_launches_directly():
    tuner = FakeTuner()
    launch = TunedLaunch(tuner)
    x = torch.zeros(2, dtype=torch.float16)
    launch[(3,)](x, 7, FLAG=1)
    launch[(3,)](x, 7, FLAG=1)
    launch[(4,)](x, 8, FLAG=1)                  # n is part of the key: tuned again
    launch[(3,)](x.float(), 7, FLAG=1)          # so is the tensors' dtype
    kinds = [c[0] for c in tuner.calls]
    assert kinds == ["tuned", "direct", "tuned", "tuned"]
    _, grid, args, kwargs = tuner.calls[1]
    assert grid == (3,) and args == (x, 7)
    assert kwargs["FLAG"] == 1 and kwargs["BLOCK"] == 16 and kwargs["num_warps"] == 4
    assert tuner.best_config.kwargs == {"BLOCK": 16}
