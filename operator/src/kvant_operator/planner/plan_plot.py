"""`kvant plan --plot FILE`: the capacity comparison as a PNG.

Three panels, every number from the planner's own `make_plan` (nothing is re-derived here): KV
tokens per replica and max concurrency per context, BF16 against FP8 KV with the requested weights;
and weights per GPU, the source's against INT4, with the requested KV dtype.

matplotlib is the optional extra `kvant-operator[plot]`, which the operator image does not carry: it
is imported only when a plot is drawn, and its absence is a one-line error, not a traceback.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner.capacity import GIB
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import Checkpoint

if TYPE_CHECKING:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'kvant-operator[plot]'"
KV_DTYPES = (KvCacheDtype.BF16, KvCacheDtype.FP8_E4M3)
DPI = 100


class PlotError(Exception):
    """The plot cannot be written; the message is one line, for the CLI to print."""


@dataclass(frozen=True)
class BarPanel:
    """One panel of grouped bars: for each series (legend label), a value per group (x label)."""

    title: str
    groups: list[str]
    series: dict[str, list[float]]
    value_format: str  # how each bar's label prints its value
    guide: tuple[str, float] | None = None  # a dashed line to read the bars against


def capacity_panels(checkpoint: Checkpoint, request: PlanRequest) -> list[BarPanel]:
    """The plot's numbers: KV tokens and max concurrency per KV dtype, weights per GPU per format."""
    by_kv = {dtype: make_plan(checkpoint, replace(request, kv_cache_dtype=dtype)) for dtype in KV_DTYPES}
    # None is the source's format; a source already in INT4 gives one bar, not two equal ones.
    by_weights = {
        plan.weights_format: plan
        for plan in (
            make_plan(checkpoint, replace(request, weights_format=f)) for f in (None, WeightFormat.INT4)
        )
    }
    weights_label = by_kv[KvCacheDtype.BF16].weights_format.value
    contexts = list(by_kv[KvCacheDtype.BF16].max_concurrency)
    return [
        BarPanel(
            "KV tokens per replica",
            [f"{weights_label} weights"],
            {f"{dtype.value} KV": [plan.kv_tokens_per_replica] for dtype, plan in by_kv.items()},
            "{:,.0f}",
        ),
        BarPanel(
            "max concurrency per context (tokens)",
            [f"{c:,}" for c in contexts],
            {
                f"{dtype.value} KV": [plan.max_concurrency[c] for c in contexts]
                for dtype, plan in by_kv.items()
            },
            "{:,.0f}",
        ),
        BarPanel(
            "weights per GPU (GiB)",
            [fmt.value + (" (source)" if fmt is checkpoint.source_format else "") for fmt in by_weights],
            {"weights": [plan.weight_bytes_per_gpu / GIB for plan in by_weights.values()]},
            "{:,.1f}",
            guide=("GPU memory", by_kv[KvCacheDtype.BF16].gpu_memory_bytes / GIB),
        ),
    ]


def check_can_plot(path: Path) -> None:
    """Fail before any work: matplotlib missing, or nowhere to write `path`."""
    _matplotlib()
    if path.is_dir():
        raise PlotError(f"--plot {path}: is a folder; name a file in it, such as {path / 'plan.png'}")
    if not path.parent.is_dir():
        raise PlotError(f"--plot {path}: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise PlotError(f"--plot {path}: folder {path.parent} is not writable")


def write_plot(panels: list[BarPanel], path: Path, title: str) -> None:
    """Draw the panels side by side and write them to `path` as a PNG, atomically."""
    figure_class, canvas_class = _matplotlib()
    figure = figure_class(figsize=(4.2 * len(panels), 3.8), dpi=DPI, layout="constrained")
    canvas_class(figure)  # an Agg canvas of its own: no pyplot, no process-wide backend
    for axes, panel in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        width = 0.8 / len(panel.series)
        for i, (label, values) in enumerate(panel.series.items()):
            offsets = [g + (i - (len(panel.series) - 1) / 2) * width for g in range(len(panel.groups))]
            bars = axes.bar(offsets, values, width, label=label)
            axes.bar_label(bars, [panel.value_format.format(v) for v in values], fontsize="x-small")
        if panel.guide:
            axes.axhline(panel.guide[1], linestyle="--", color="grey", linewidth=1, label=panel.guide[0])
        axes.set_xticks(range(len(panel.groups)), panel.groups)
        axes.set_xlim(-0.8, len(panel.groups) - 0.2)  # a single group keeps a bar's usual width
        axes.yaxis.set_major_formatter("{x:,.0f}")  # 1,500,000 rather than 1.5 and a 1e6 offset
        axes.set_title(panel.title, fontsize="medium")
        axes.margins(y=0.15)  # room for the bar labels
        axes.legend(fontsize="small")
    figure.suptitle(title, fontsize="small")
    _save_atomically(figure, path)


def _matplotlib() -> tuple[type[Figure], type[FigureCanvasAgg]]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional extra
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError:
        raise PlotError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    return Figure, FigureCanvasAgg


def _save_atomically(figure: Figure, path: Path) -> None:
    """A reader never sees half a PNG, and a failed write leaves an earlier plot at `path` intact."""
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, before the rename
            dir=path.parent, prefix=f".{path.name}.", suffix=".part", delete=False
        )
    except OSError as err:
        raise PlotError(f"--plot {path}: cannot write in {path.parent}: {err.strerror}") from None
    temp = Path(handle.name)
    try:
        with handle:
            os.fchmod(handle.fileno(), 0o644)  # a temp file is 0600; the plot is for everyone to read
            figure.savefig(handle, format="png", dpi=DPI)
        temp.replace(path)
    except OSError as err:
        raise PlotError(f"--plot {path}: {err.strerror or err}") from None
    finally:
        temp.unlink(missing_ok=True)
