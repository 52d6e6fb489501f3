"""The soak's table: one row per window (or per step: setup, deletion, memory), and how it prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.soak.catalog import BOUND
from bench.soak.load import Window

RSS_GROWTH = 0.25  # one operator process growing more than this over its first sample is a violation


@dataclass
class Row:
    fault: str
    target: str = ""
    at: str = "-"
    requests: int = 0
    non_200: int = 0
    lost: int = 0
    allowed: str = "0"
    ready_seconds: float | None = None
    bound: float = BOUND
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def count(row: Row, windows: dict[str, Window]) -> None:
    for name, load in windows.items():
        row.requests += len(load.requests)
        row.non_200 += load.non_200
        row.lost += load.lost()
        row.notes.append(f"{name} {load.outcome()}")


def memory_row(samples: list[tuple[int, float]]) -> Row:
    """The operator's VmRSS samples (operator start, MiB): start, end, max, and growth per process."""
    row = Row("operator memory (VmRSS)", target="operator")
    if not samples:
        row.violations.append("never sampled")
        return row
    values = [mib for _, mib in samples]
    row.notes.append(
        f"start {values[0]:.0f} MiB, end {values[-1]:.0f}, max {max(values):.0f}, {len(values)} samples"
    )
    for start in sorted({s for s, _ in samples}):
        run = [mib for s, mib in samples if s == start]
        growth = run[-1] / run[0] - 1
        if len(run) > 1:
            row.notes.append(
                f"process {start}: {run[0]:.0f} -> {run[-1]:.0f} MiB over {len(run)} samples ({growth:+.0%})"
            )
        if growth > RSS_GROWTH:
            row.violations.append(f"process {start} grew {growth:+.0%} (limit +{RSS_GROWTH:.0%})")
    return row


def table(rows: list[Row], title: str) -> str:
    columns = (
        "fault",
        "target",
        "at s",
        "requests",
        "non-200",
        "lost (allowed)",
        "ready s (bound)",
        "violations / notes",
    )
    cells = [columns]
    for r in rows:
        ready = f"{r.ready_seconds:.1f}" if r.ready_seconds is not None else "-"
        notes = "; ".join([*(f"VIOLATED: {v}" for v in r.violations), *r.notes])
        lost = f"{r.lost} ({r.allowed})"
        cells.append(
            (
                r.fault,
                r.target,
                r.at,
                str(r.requests),
                str(r.non_200),
                lost,
                f"{ready} ({r.bound:.0f})",
                notes,
            )
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns) - 1)]
    lines = [" | ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]) for row in cells]
    return "\n".join([title, *lines])
