"""``flashtile bench``: check attention implementations against the float64 reference, then time
them over a grid of shapes.

Modules, in the order a run uses them:

- :mod:`.cli`        options, presets (``--quick``, ``--full``), the run
- :mod:`.cases`      :class:`BenchCase` (one grid point), the FLOP convention, the grid
- :mod:`.providers`  the implementations compared (flashtile, SDPA, flex, eager, flash-attn)
- :mod:`.check`      correctness against ``flashtile.attention_reference`` before any timing
- :mod:`.timing`     what is timed per mode, ``do_bench`` / ``perf_counter`` medians, peak memory
- :mod:`.runner`     the loop over (case, provider) with a progress bar; ratios
- :mod:`.report`     tables, JSON and metadata
- :mod:`.plot`       PNG plots
"""

from .cases import BenchCase, attention_flops

__all__ = ["BenchCase", "attention_flops"]
