"""The comparison table `kvant plan` prints: one column per weights x KV-dtype variant."""

from __future__ import annotations

from collections.abc import Callable

from kvant_operator.planner.capacity import GIB
from kvant_operator.planner.capacity_plan import CapacityPlan


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def _context(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def render_table(plans: list[CapacityPlan], title: str) -> str:
    """`plans[0]` is the requested plan; it is marked with `*`."""
    rows: list[tuple[str, Callable[[CapacityPlan], str]]] = [
        ("checkpoint", lambda p: _gib(p.checkpoint_bytes)),
        ("weights per GPU", lambda p: _gib(p.weight_bytes_per_gpu)),
        ("KV bytes/token/GPU", lambda p: f"{p.kv_bytes_per_token_per_gpu:,}"),
        ("mem_fraction_static", lambda p: f"{p.mem_fraction_static:.3f}"),
        ("KV tokens per replica", lambda p: f"{p.kv_tokens_per_replica:,}"),
        *(
            (f"max concurrency @{_context(c)}", lambda p, c=c: f"{p.max_concurrency[c]:,}")
            for c in plans[0].max_concurrency
        ),
        ("fits", lambda p: "yes" if p.fits else "NO"),
    ]
    headers = [
        f"{p.weights_format} + {p.kv_cache_dtype} KV" + (" *" if i == 0 else "") for i, p in enumerate(plans)
    ]
    cells = [[render(p) for p in plans] for _, render in rows]
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    lines = [
        title,
        "",
        " " * label_width + "  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
    ]
    for (label, _), row in zip(rows, cells, strict=True):
        lines.append(
            label.ljust(label_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
        )
    lines.append("")
    lines.append("* requested plan")
    lines.extend(f"warning: {w}" for w in plans[0].warnings)
    return "\n".join(lines)
