"""PNG plots: TFLOP/s against seqlen, one line per provider, one panel per (head dim x mask),
one figure per (mode, dtype, GQA ratio) with those in the title.

Uses matplotlib's object API with the Agg canvas, so it never opens a window or changes the
user's pyplot backend.
"""

from __future__ import annotations

from pathlib import Path

from .report import group_key
from .runner import Measurement

# Fixed colours so a provider looks the same in every plot of every run.
COLOURS = {"flashtile": "#d62728", "sdpa-cudnn": "#1f77b4", "sdpa-flash": "#2ca02c",
           "sdpa-efficient": "#9467bd", "sdpa-math": "#8c564b", "flex": "#ff7f0e",
           "eager": "#7f7f7f", "fa2": "#17becf", "fa4": "#000000"}


def _seqlen_label(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _plot_group(path: Path, title: str, measurements: list[Measurement],
                providers: tuple[str, ...]) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    headdims = sorted({m.case.headdim for m in measurements})
    masks = sorted({m.case.causal for m in measurements})
    seqlens = sorted({m.case.seqlen for m in measurements})
    fig = Figure(figsize=(max(6.4, 4.2 * len(headdims)), 1.0 + 3.2 * len(masks)),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(masks), len(headdims), squeeze=False, sharex=True)
    for row, causal in enumerate(masks):
        for col, headdim in enumerate(headdims):
            ax = axes[row][col]
            for name in providers:
                points = sorted((m.case.seqlen, m.tflops) for m in measurements
                                if m.provider == name and m.status == "ok"
                                and m.case.headdim == headdim and m.case.causal == causal)
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", label=name, color=COLOURS.get(name),
                            linewidth=2.5 if name == "flashtile" else 1.5)
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [_seqlen_label(s) for s in seqlens])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_title(f"d = {headdim}, {'causal' if causal else 'full'}")
            ax.grid(True, alpha=0.3)
            if row == len(masks) - 1:
                ax.set_xlabel("seqlen")
            if col == 0:
                ax.set_ylabel("TFLOP/s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes.flat:  # a provider missing from the first panel still gets a legend entry
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5))
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    return path


def write_plots(stem: Path, measurements: list[Measurement], providers: tuple[str, ...],
                device: str) -> list[Path]:
    """One PNG per (mode, dtype, GQA): ``<stem>-<mode>-<dtype>[-gqa<r>].png``."""
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(group_key(m.case), []).append(m)
    paths = []
    for (mode, dtype, gqa), group in groups.items():
        suffix = f"-{mode}-{dtype}" + (f"-gqa{gqa}" if gqa > 1 else "")
        gqa_text = f", hq/hkv = {gqa}" if gqa > 1 else ""
        title = f"attention {mode}, {dtype}{gqa_text}: TFLOP/s\n{device}"
        path = stem.parent / (stem.name + suffix + ".png")
        paths.append(_plot_group(path, title, group, providers))
    return paths
