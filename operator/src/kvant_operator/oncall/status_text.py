"""The text `kvant status` prints for one model (status_view.ModelStatus): one screen for on-call.
Pure: no I/O here."""

from __future__ import annotations

from kvant_contracts.kube_object import Obj
from kvant_contracts.limits import ConcurrencyBounds
from kvant_operator.oncall.status_view import PLANNED_RUNS, ModelStatus, Replica, TenantLoad

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], low: float = 0.0, high: float = 1.0) -> str:
    span = (high - low) or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, max(0, int((v - low) / span * len(_BARS))))] for v in values)


def render_text(model: ModelStatus) -> str:
    lines = [f"{model.namespace}/{model.name}  phase {model.phase}  generation {model.generation}"]
    if model.observed_generation is not None and model.observed_generation < model.generation:
        lines[0] += f" (the operator has seen {model.observed_generation} so far)"
    shown = [c for c in model.conditions if c.get("type") != "Progressing"]
    lines.append("  " + "  ".join(f"{c['type']}={c['status']} {c.get('reason', '')}".rstrip() for c in shown))
    failing = [c for c in model.conditions if c["type"] in ("Stalled", "Degraded") and c["status"] == "True"]
    for condition in failing[:1]:
        lines.append(f"  ! {condition.get('message', '')[:300]}")
    limits, protection = model.limits, model.protection
    bounds = limits.get("concurrencyBounds") or {}
    low = bounds.get("min", ConcurrencyBounds().min)
    effective = protection.get("effectiveConcurrency", limits.get("maxConcurrency"))
    lines.append(
        f"  limits: effective concurrency {effective} (maxConcurrency {limits.get('maxConcurrency')}, "
        f"protection {low}..{bounds.get('max', limits.get('maxConcurrency'))}, "
        f"{limits.get('protectionMode')}), maxQueued {limits.get('maxQueued')}, queueTimeout "
        f"{limits.get('queueTimeoutSeconds')}s, target KV usage {limits.get('targetTokenUsage')}"
    )
    if protection.get("lastDecision"):
        when = protection.get("lastDecisionTime", "")
        lines.append(f"  last decision: {protection['lastDecision']}" + (f" ({when})" if when else ""))
    if model.planned_run is not None:
        lines.append(_planned_run_line(model))
    if model.autoscaling is not None:
        lines += _autoscaling_lines(model.autoscaling)
    if model.replicas:
        header = (
            "replica",
            "kv usage",
            "running",
            "queued",
            "retracted",
            "429/503",
            "gate queue",
            "concurrency",
        )
        rows = [header] + [_row(r) for r in model.replicas]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += [
            ("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
            for row in rows
        ]
        lines.append(f"  (retracted: {model.retractions_window}; 429/503: since the gate started)")
        lines += [f"  {r.pod}: {r.error}" for r in model.replicas if r.error]
    else:
        lines.append("  no ready replica")
    if model.usage_history:
        lines.append(
            f"  kv usage, last 15 min: {sparkline(model.usage_history)}  (max {max(model.usage_history):.2f})"
        )
    lines += _tenant_lines(model.tenants)
    return "\n".join(lines)


def _tenant_lines(tenants: list[TenantLoad]) -> list[str]:
    """The tenants table; nothing from gates that export no tenant series (older gates) or idle ones."""
    if not tenants:
        return []
    header = ("tenant", "class", "admitted tokens", "queued", "refused")
    rows = [header] + [
        (t.tenant, t.priority, _count(t.admitted_tokens), _count(t.queued), _refused(t)) for t in tenants
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return [
        "  tenants, summed over the replicas (top by refused, then admitted):",
        *(
            ("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
            for row in rows
        ),
        "  (admitted tokens and refused: since each gate started; queued: now)",
    ]


def _refused(load: TenantLoad) -> str:
    reasons = sorted((r for r, n in load.refused.items() if n), key=lambda r: (-load.refused[r], r))
    if not reasons:
        return "0"
    return (
        f"{_count(load.refused_total)} (" + ", ".join(f"{r} {_count(load.refused[r])}" for r in reasons) + ")"
    )


def _count(value: float) -> str:
    """A count as on-call reads it at a glance, 3 digits at most: 950, 12.3k, 4.56M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            decimals = 2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0
            return f"{scaled:.{decimals}f}{suffix}"
    return f"{value:.0f}"


def _planned_run_line(model: ModelStatus) -> str:
    """Where the run the phase waits on goes and how long the plan expects it to take: on-call's
    answer to "is this stuck?" for a conversion or calibration that runs for minutes or hours."""
    run = model.planned_run or {}
    _, what = PLANNED_RUNS[model.phase]
    gpus = int(run.get("gpus", 0))
    where = f"{run.get('device', '?')}" + (f", {gpus} GPU{'' if gpus == 1 else 's'}" if gpus else "")
    return (
        f"  {what}: on {where}, estimated {_duration(int(run.get('etaSeconds', 0)))} "
        f"({run.get('samples', '?')} x {run.get('sequenceLength', '?')} tokens, "
        f"{float(run.get('flops', 0)):.1e} FLOPs)"
    )


def _duration(seconds: int) -> str:
    """1h05m, 6m18s, 42s."""
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _autoscaling_lines(autoscaling: Obj) -> list[str]:
    """The autoscaler's replicas and bounds, its most telling condition, and its message (why it
    cannot scale, or that the cluster lacks the HPA or custom metrics API)."""
    current = autoscaling.get("currentReplicas", 0)
    line = (
        f"  autoscaling: {current} replica{'' if current == 1 else 's'} "
        f"(desired {autoscaling.get('desiredReplicas', 0)}, min {autoscaling.get('minReplicas', '?')}, "
        f"max {autoscaling.get('maxReplicas', '?')})"
    )
    if autoscaling.get("reason"):
        line += f" — {autoscaling['reason']}"
    when = autoscaling.get("lastScaleTime")
    line += f"; last scaled {when}" if when else "; not scaled yet"
    lines = [line]
    if autoscaling.get("message"):
        lines.append(f"    {str(autoscaling['message'])[:300]}")
    return lines


def _row(r: Replica) -> tuple[str, ...]:
    def num(value: float | None, fmt: str = "{:.0f}") -> str:
        return "-" if value is None else fmt.format(value)

    return (
        r.pod,
        num(r.token_usage, "{:.2f}"),
        num(r.running),
        num(r.queued_engine),
        num(r.retracted),
        num(r.turned_away),
        num(r.queued_gate),
        num(r.concurrency),
    )
