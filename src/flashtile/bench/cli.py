"""Check flashtile and other attention implementations against the float64 reference, then time
them over a grid of shapes.

Every provider is first compared with flashtile.attention_reference (a wrong one is reported
WRONG and not timed); then each grid point is timed (median of triton.testing.do_bench on a GPU,
of time.perf_counter on CPU) and reported in TFLOP/s with flash-attention's FLOP convention.
Output: a table per (mode, dtype), a JSON file with every measurement and the run's metadata,
and a PNG plot per (mode, dtype) in --out.

Without shape options it runs --quick: about a minute on a GPU (bf16, d=128, seqlen 1k/4k);
on CPU the torch path at small sizes (fp32, d=64, seqlen 128/256).

Lists may be written with commas or spaces: --seqlens 1k,4k or --seqlens 1024 4096.

examples:
  flashtile bench                                   # --quick
  flashtile bench --full                            # d 64/128, seqlen 512..16k, causal both
  flashtile bench --full --dtype bf16,fp16 --mode all
  flashtile bench --headdims 96,256 --gqa 8 --providers flashtile,cudnn,fa4
  flashtile bench --seqlens 65536 --batch 1 --nheads 16 --headdims 128 \\
                  --mode fwdbwd --causal no --memory --providers flashtile,cudnn,flash,eager
  flashtile bench --seqlens 512,1k --kernel-times   # kernels alone beside the full call
  flashtile bench --full --rounds 2 --power         # and the SM clock / power while timed
  flashtile bench --list-providers

providers: flashtile, sdpa-cudnn (cudnn), sdpa-flash (flash), sdpa-efficient (efficient),
  sdpa-math (math), flex, eager, fa2, fa4 (the last two when flash_attn / flash_attn.cute import)

exit status: 0; 1 if the --subject provider (flashtile) was WRONG or failed; 2 for bad options.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from . import providers as P
from . import report as R
from .cases import DTYPES, MODES, BenchCase, GridSpec, build_cases
from .power import open_source
from .runner import RunOptions, run_grid

FULL_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
FULL_HEADDIMS = (64, 128)
DEFAULT_MODES = ("fwd", "fwdbwd")
SHAPE_OPTIONS = ("seqlens", "headdims", "nheads", "batch", "tokens")
OPTIONAL = ("fa2", "fa4")       # dropped from default provider lists when not installed
QUICK_GPU_PROVIDERS = ("flashtile", "sdpa-cudnn", "sdpa-flash", "eager", "fa2", "fa4")
QUICK_CPU_PROVIDERS = ("flashtile", "eager", "sdpa-math")


class OptionError(ValueError):
    """A bad command-line option; reported as ``flashtile bench: error: ...``, exit status 2."""


# ----------------------------------------------------------------------------- parsing

def _positive_ints(text: str) -> tuple[int, ...]:
    """``"512,1k,16K"`` -> ``(512, 1024, 16384)``."""
    values = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        scale = 1024 if item.endswith("k") else 1
        try:
            value = int(item[:-1] if scale > 1 else item) * scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not an integer (e.g. 512,1k,16k)")
        if value < 1:
            raise argparse.ArgumentTypeError(f"{item!r} must be at least 1")
        values.append(value)
    if not values:
        raise argparse.ArgumentTypeError("expected a comma-separated list, e.g. 512,1k,16k")
    return tuple(dict.fromkeys(values))


def _positive_int(text: str) -> int:
    values = _positive_ints(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one integer, got {text!r}")
    return values[0]


def _choices(allowed: tuple[str, ...], expand: dict[str, tuple[str, ...]] | None = None):
    """A type for comma-separated choices, e.g. ``--dtype bf16,fp16``."""
    def parse(text: str) -> tuple[str, ...]:
        values = []
        for item in (t.strip().lower() for t in text.split(",")):
            if expand and item in expand:
                values.extend(expand[item])
            elif item in allowed:
                values.append(item)
            elif item:
                options = list(allowed) + list(expand or ())
                raise argparse.ArgumentTypeError(f"{item!r} is not one of {', '.join(options)}")
        if not values:
            raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(allowed)}")
        return tuple(dict.fromkeys(values))
    return parse


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


class _ListAction(argparse.Action):
    """Lists written ``512,1k``, ``512 1k`` or both; the values are merged without duplicates."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, nargs="+", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        merged = list(getattr(namespace, self.dest) or ()) + [v for chunk in values for v in chunk]
        setattr(namespace, self.dest, tuple(dict.fromkeys(merged)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    grid = parser.add_argument_group("grid (without shape options: --quick)")
    preset = grid.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true",
                        help="small grid, about a minute on a GPU; on CPU the torch path at "
                             "small sizes (default when no shape option is given)")
    preset.add_argument("--full", action="store_true",
                        help="the issue-7 grid: d 64,128 x seqlen 512..16k x causal no/yes, "
                             "fwd and fwdbwd, every provider")
    grid.add_argument("--seqlens", type=_positive_ints, action=_ListAction, metavar="N",
                      help="sequence lengths, e.g. 512,1k,64k (default 512,1k,2k,4k,8k,16k; "
                           "--quick: 1k,4k)")
    grid.add_argument("--headdims", type=_positive_ints, action=_ListAction, metavar="D",
                      help="head dims (default 64,128; --quick: 128)")
    grid.add_argument("--nheads", type=_positive_int, metavar="N",
                      help="query heads (default: 2048 // headdim, as in the anchors)")
    size = grid.add_mutually_exclusive_group()
    size.add_argument("--batch", type=_positive_int, metavar="N",
                      help="batch size for every seqlen")
    size.add_argument("--tokens", type=_positive_int, metavar="N",
                      help="batch = tokens // seqlen, at least 1 (default 16384)")
    grid.add_argument("--causal", choices=("no", "yes", "both"), default=None,
                      help="mask (default: both)")
    grid.add_argument("--dtype", type=_choices(tuple(DTYPES)), action=_ListAction,
                      metavar="DTYPE",
                      help="bf16, fp16, fp32 or a list (default: bf16 on GPU, fp32 on CPU)")
    grid.add_argument("--mode", type=_choices(MODES, {"all": MODES}), action=_ListAction,
                      metavar="MODE",
                      help="fwd, bwd, fwdbwd, all or a list (default: fwd,fwdbwd)")
    grid.add_argument("--gqa", type=_positive_int, default=1, metavar="R",
                      help="query heads per key/value head (default 1: multi-head)")

    what = parser.add_argument_group("providers and measurement")
    what.add_argument("--providers", type=_names, action=_ListAction, metavar="NAME",
                      help="providers or 'all' (default: all; --quick: a fast subset)")
    what.add_argument("--subject", default="flashtile", metavar="NAME",
                      help="provider whose ratios the table shows (default flashtile)")
    what.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                      help="auto: cuda when available")
    what.add_argument("--warmup", type=float, default=25.0, metavar="MS",
                      help="warm-up time per measurement in ms (default 25)")
    what.add_argument("--rep", type=float, default=100.0, metavar="MS",
                      help="measurement time per point in ms (default 100)")
    what.add_argument("--rounds", type=_positive_int, default=1, metavar="N",
                      help="time every point N times, the providers in turn (reversed every "
                           "other round), and report the median round: ratios between "
                           "providers then do not hang on one reading each while the clock "
                           "drifts (default 1; the rounds' times are in the JSON)")
    what.add_argument("--memory", action="store_true",
                      help="also report peak extra GPU memory per call")
    what.add_argument("--kernel-times", action="store_true",
                      help="also time each call's GPU work alone (its kernels' summed device "
                           "times, torch profiler): where the host bounds a call (short "
                           "sequences) this separates the kernels from the launch path")
    what.add_argument("--power", action="store_true",
                      help="sample the GPU's SM clock and board power (NVML) while each point "
                           "is timed: at the card's power limit the clock falls, and a time "
                           "can be the clock's rather than the kernel's (JSON: sm_mhz, watts, "
                           "power_capped)")
    what.add_argument("--check-only", action="store_true",
                      help="check every provider against the reference, time nothing")
    what.add_argument("--list-providers", action="store_true",
                      help="print the providers and whether they can run here, then exit")
    what.add_argument("--warm-procs", type=int, default=None, metavar="N",
                      help="on a GPU, compile flashtile's candidate kernel configs for the grid "
                           "in N parallel processes before timing (flashtile.bench.warm; "
                           "0 = off; default: one per candidate config)")

    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, default=Path("bench-out"), metavar="DIR",
                     help="directory for the JSON and PNG files (default ./bench-out)")
    out.add_argument("--no-plot", action="store_true", help="do not write PNG plots")


# ----------------------------------------------------------------------------- configuration

@dataclass(frozen=True)
class Config:
    """The command line resolved into what to run."""

    spec: GridSpec
    options: RunOptions
    subject: str
    preset: str             # "quick", "full" or "custom"
    notes: tuple[str, ...]


def _device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise OptionError("--device cuda: no CUDA device is visible; use --device cpu")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def _providers(args, device: torch.device, quick: bool) -> tuple[tuple[str, ...], list[str]]:
    """The provider list and notes about optional providers left out of a default list."""
    if args.providers:
        try:
            return tuple(P.resolve_names(list(args.providers))), []
        except ValueError as exc:
            raise OptionError(f"--providers: {exc}") from None
    if quick:
        names = QUICK_GPU_PROVIDERS if device.type == "cuda" else QUICK_CPU_PROVIDERS
    else:
        names = tuple(P.PROVIDERS)
    notes, kept = [], []
    for name in names:
        if name not in P.PROVIDERS:
            continue
        if name in OPTIONAL:
            # An uninstalled optional package would only add a column of n/a.
            _, reason = P.try_import(P.PROVIDERS[name].module, "flash_attn_func")
            if reason:
                notes.append(f"{name} left out: {reason}")
                continue
        kept.append(name)
    return tuple(kept), notes


def _grid(args, device: torch.device, quick: bool) -> GridSpec:
    """Presets (--quick on GPU/CPU, --full) overridden by explicit options."""
    on_gpu = device.type == "cuda"
    if quick and on_gpu:
        seqlens, headdims, nheads, batch = (1024, 4096), (128,), None, None
    elif quick:
        seqlens, headdims, nheads, batch = (128, 256), (64,), 4, 2
    else:
        seqlens, headdims, nheads, batch = FULL_SEQLENS, FULL_HEADDIMS, None, None
    if args.tokens is not None:
        batch = None
    causal = {"no": (False,), "yes": (True,), "both": (False, True), None: (False, True)}
    return GridSpec(
        seqlens=args.seqlens or seqlens,
        headdims=args.headdims or headdims,
        causal=causal[args.causal],
        dtypes=args.dtype or (("bf16",) if on_gpu else ("fp32",)),
        modes=args.mode or DEFAULT_MODES,
        gqa=args.gqa,
        nheads=args.nheads if args.nheads is not None else nheads,
        batch=args.batch if args.batch is not None else batch,
        tokens=args.tokens if args.tokens is not None else 16384,
    )


def resolve_config(args) -> Config:
    """Turn parsed arguments into a :class:`Config`; raises :class:`OptionError`."""
    device = _device(args.device)
    shape_given = any(getattr(args, name) is not None for name in SHAPE_OPTIONS)
    quick = args.quick or (not args.full and not shape_given)
    spec = _grid(args, device, quick)
    if spec.nheads is not None and spec.nheads % spec.gqa:
        raise OptionError(f"--nheads {spec.nheads} is not a multiple of --gqa {spec.gqa}; "
                          f"use nheads = k * {spec.gqa}")
    if args.warmup < 0 or args.rep <= 0:
        raise OptionError(f"--warmup must be >= 0 and --rep > 0 (ms), got {args.warmup:g} "
                          f"and {args.rep:g}")
    names, notes = _providers(args, device, quick)
    subject = P.ALIASES.get(args.subject.lower(), args.subject.lower())
    if subject not in P.PROVIDERS:
        raise OptionError(f"--subject {args.subject!r} is not a provider; choose from "
                          f"{', '.join(P.PROVIDERS)}")
    if args.memory and device.type != "cuda":
        notes.append("--memory measures CUDA allocations only; nothing to report on CPU")
    if args.kernel_times and device.type != "cuda":
        notes.append("--kernel-times reads CUDA kernels' device times; nothing to report on CPU")
    power = None
    if args.power and not args.check_only:
        power, why_not = open_source(device)
        if why_not:
            notes.append(why_not)
    options = RunOptions(device=device, providers=names, warmup_ms=args.warmup, rep_ms=args.rep,
                         memory=args.memory, check_only=args.check_only,
                         kernel_times=args.kernel_times, rounds=args.rounds, power=power)
    preset = "quick" if quick else ("full" if args.full else "custom")
    return Config(spec=spec, options=options, subject=subject, preset=preset,
                  notes=tuple(notes))


# ----------------------------------------------------------------------------- running

def _console():
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        # Captured output (CI, remote runs) would otherwise wrap the wide tables at 80 columns.
        console = Console(width=200)
    return console


def _list_providers(console, config: Config) -> int:
    from rich.table import Table

    spec, device = config.spec, config.options.device
    case = BenchCase(batch=1, seqlen=spec.seqlens[0], nheads=spec.gqa, nheads_kv=1,
                     headdim=spec.headdims[0], causal=False, dtype=spec.dtypes[0], mode="fwd")
    table = Table(title=f"providers on {device} ({case.dtype}, d={case.headdim})")
    for header in ("name", "layout", "what", "here"):
        table.add_column(header)
    for name, provider in P.PROVIDERS.items():
        reason = provider.unavailable(case, device)
        table.add_row(name, provider.layout, provider.description,
                      "[green]available[/]" if reason is None else f"[dim]n/a: {reason}[/]")
    console.print(table)
    return 0


def _write_outputs(console, config: Config, args, measurements, notes,
                   summary) -> list[Path]:
    """JSON (always) and PNGs (unless --no-plot/--check-only); returns the paths."""
    args.out.mkdir(parents=True, exist_ok=True)
    stem = R.unique_stem(args.out)
    cli_options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                   if not callable(v)}
    cli_options["preset"] = config.preset
    metadata = R.collect_metadata(config.options, config.spec, cli_options, notes)
    paths = [R.write_json(stem.with_suffix(".json"), metadata, measurements, summary)]
    if not args.no_plot and not args.check_only:
        try:
            from .plot import write_plots
            paths += write_plots(stem, measurements, config.options.providers,
                                 R.device_name(config.options.device))
        except Exception as exc:  # a missing/old matplotlib must not lose the measurements
            console.print(f"[yellow]plot skipped: {type(exc).__name__}: {exc}[/]")
    return paths


def run(args) -> int:
    """Entry point of ``flashtile bench`` (``args`` from :func:`add_arguments`)."""
    try:
        config = resolve_config(args)
        cases, grid_notes = build_cases(config.spec)
    except (OptionError, ValueError) as exc:
        print(f"flashtile bench: error: {exc}", file=sys.stderr)
        return 2
    console = _console()
    if args.list_providers:
        return _list_providers(console, config)

    options = config.options
    device = R.device_name(options.device)
    notes = list(config.notes) + grid_notes
    console.print(f"[bold]flashtile bench[/] on {device}: {len(cases)} points x "
                  f"{len(options.providers)} providers ({', '.join(options.providers)}), "
                  f"{config.preset} grid")
    for note in notes:
        console.print(f"[dim]note: {note}[/]")

    if (args.warm_procs != 0 and options.device.type == "cuda"
            and "flashtile" in options.providers):
        from .warm import warm_compile_cache
        spec = config.spec
        seconds = warm_compile_cache(spec.headdims, spec.causal, spec.dtypes, spec.gqa,
                                     spec.nheads, args.warm_procs)
        console.print(f"[dim]compiled flashtile's kernel configs in {seconds:.0f} s[/]")

    measurements = run_grid(cases, options, console)

    for table in R.build_tables(measurements, options, config.subject, device):
        console.print(table)
    for note in R.status_notes(measurements) + R.call_gap_notes(measurements):
        console.print(f"[yellow]{note}[/]", highlight=False)
    summary = R.subject_summary(measurements, config.subject)
    for line in R.summary_lines(summary):
        console.print(f"[bold]{line}[/]", highlight=False)
    for line in R.power_lines(measurements):
        console.print(f"[yellow]{line}[/]", highlight=False)
    for path in _write_outputs(console, config, args, measurements, notes, summary):
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    failed = [m for m in measurements
              if m.provider == config.subject and m.status in ("WRONG", "error")]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m flashtile.bench.cli ...``: the subcommand without the top-level CLI."""
    parser = argparse.ArgumentParser(prog="flashtile bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
