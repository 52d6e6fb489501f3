"""PNG plots of the benches' tables, for readers who would rather look than read.

Each bench hands the rows it already prints to one function here, which writes one small PNG
(100 dpi) beside the bench. matplotlib is imported inside `write_panels` and draws on an Agg canvas
of its own (no pyplot, no global backend), so importing this module loads nothing heavy: a run with
`--no-plot` and the tests that import the benches' helpers never pay for it.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

DPI = 100
# Lines that coincide (two modes that admitted alike) stay visible: each has its own dash and marker.
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))
Points = Sequence[tuple[float, float]]


def add_plot_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """`--plot PNG` and `--no-plot`, alike in every bench; `default` says where the plot goes."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--plot", type=Path, metavar="PNG", help=f"where to draw the plot (default: {default})"
    )
    group.add_argument("--no-plot", action="store_true", help="print the table only")


def plot_destination(parser: argparse.ArgumentParser, args: argparse.Namespace, default: Path) -> Path | None:
    """Where to draw, or None with --no-plot. A missing folder is a usage error now, not after the run."""
    if args.no_plot:
        return None
    path: Path = args.plot or default
    if not path.parent.is_dir():
        parser.error(f"--plot {path}: folder {path.parent} does not exist")
    return path


@dataclass(frozen=True)
class Panel:
    """One set of axes: a line per label, and an optional dashed grey guide (a limit to read against)."""

    title: str
    ylabel: str
    lines: Mapping[str, Points]
    guide: tuple[str, Points] | None = None


def write_panels(
    path: Path,
    title: str,
    xlabel: str,
    panels: Sequence[Panel],
    *,
    xticks: Sequence[float] = (),
    share_y: bool = False,
) -> Path:
    """Panels side by side, y from 0, sharing one x label. `xticks` are multiples (1x, 2x, 4x), spaced
    evenly on a log2 axis; `share_y` puts panels of one quantity on one scale, to compare by eye."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - only a plot pays for it
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(4.4 * len(panels), 3.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(1, len(panels), squeeze=False, sharey=share_y)
    for axes, panel in zip(grid[0], panels, strict=True):
        for (label, points), (dash, marker) in zip(
            panel.lines.items(), itertools.cycle(STYLES), strict=False
        ):
            axes.plot(*zip(*points, strict=True), linestyle=dash, marker=marker, markersize=4, label=label)
        if panel.guide:
            label, points = panel.guide
            axes.plot(*zip(*points, strict=True), linestyle="--", color="grey", linewidth=1, label=label)
        if xticks:
            axes.set_xscale("log", base=2)
            axes.set_xticks(list(xticks), [f"{x:g}x" for x in xticks])
            axes.set_xticks([], minor=True)
        axes.set(title=panel.title, xlabel=xlabel, ylabel=panel.ylabel)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    for axes in grid[0]:  # once every line is drawn: a shared scale then covers all the panels
        axes.set_ylim(bottom=0)
        if share_y:
            axes.label_outer()
    figure.suptitle(title, fontsize="medium")
    figure.savefig(path, dpi=DPI)
    return path


def goodput_by_load(
    rows: Sequence[Mapping[str, Any]],
    modes: Sequence[str],
    path: Path,
    title: str,
    xlabel: str = "load (clients, x the BF16 cache)",
) -> Path:
    """bench/protection's rows (`kv`, `load`, and per mode a cell with `goodput`): a panel per KV dtype,
    goodput against load, a line per mode."""
    kv_dtypes = dict.fromkeys(row["kv"] for row in rows)  # in the bench's order
    panels = [
        Panel(
            f"{kv} KV",
            "goodput (output tok/s within the SLO)",
            {
                mode: [(row["load"], row[mode]["goodput"]) for row in rows if row["kv"] == kv]
                for mode in modes
            },
        )
        for kv in kv_dtypes
    ]
    loads = sorted({row["load"] for row in rows})
    return write_panels(path, title, xlabel, panels, xticks=loads, share_y=True)


class SweepPoint(Protocol):
    """What bench/engine_sim measures at one concurrency."""

    @property
    def concurrency(self) -> int: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    @property
    def mean_running(self) -> float: ...


def batch_by_concurrency(curves: Mapping[str, Sequence[SweepPoint]], path: Path, title: str) -> Path:
    """bench/engine_sim's curves, one per KV dtype: running batch and throughput against concurrency."""
    levels = sorted({p.concurrency for points in curves.values() for p in points})
    # Every client running at once: where a curve leaves this line, the KV cache is full.
    everyone = ("running = concurrency", [(float(c), float(c)) for c in levels])

    def lines(value: Callable[[SweepPoint], float]) -> dict[str, Points]:
        return {f"{kv} KV": [(p.concurrency, value(p)) for p in points] for kv, points in curves.items()}

    panels = [
        Panel("running batch", "mean running requests", lines(lambda p: p.mean_running), guide=everyone),
        Panel("throughput", "output tok/s", lines(lambda p: p.output_tokens_per_s)),
    ]
    return write_panels(path, title, "concurrency (clients)", panels)
