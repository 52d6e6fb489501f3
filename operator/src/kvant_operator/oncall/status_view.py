"""What `kvant status` shows for one model, built from its CR, its replicas' metrics and (when there
is a Prometheus) a short history; and the text it prints. Pure: no I/O here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.limits import ConcurrencyBounds, Limits
from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_contracts.sglang_metrics import (
    NUM_QUEUE_REQS,
    NUM_RETRACTED_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    PREFIX,
    TOKEN_USAGE,
    Series,
    combine,
    retractions_total,
    scheduler_of,
)

Obj = dict[str, Any]
_BARS = "▁▂▃▄▅▆▇█"


@dataclass
class Replica:
    pod: str
    token_usage: float | None = None
    running: float | None = None
    queued_engine: float | None = None
    retracted: float | None = None  # in the last 5 minutes with Prometheus, else since the engine started
    turned_away: float | None = None  # the gate's 429/503s since it started
    queued_gate: float | None = None
    concurrency: float | None = None
    error: str | None = None  # why the metrics could not be read


@dataclass
class ModelStatus:
    namespace: str
    name: str
    phase: str
    generation: int
    observed_generation: int | None
    conditions: list[Obj]
    limits: Obj
    protection: Obj
    # status.autoscaling as the operator wrote it from the model's HPA; None without spec.autoscaling.
    autoscaling: Obj | None = None
    replicas: list[Replica] = field(default_factory=list)
    usage_history: list[float] = field(default_factory=list)  # worst replica, last 15 minutes
    retractions_window: str = "since the engine started"

    def to_json(self) -> Obj:
        return asdict(self)


def model_status(qm: Obj) -> ModelStatus:
    status = qm.get("status") or {}
    spec = qm.get("spec") or {}
    protection = spec.get("protection") or {}
    limits = {
        **(spec.get("limits") or {}),
        "targetTokenUsage": protection.get("targetTokenUsage", Limits().targetTokenUsage),
        "protectionMode": protection.get("mode", Limits().mode),
        "concurrencyBounds": protection.get("concurrency") or {},
    }
    return ModelStatus(
        namespace=qm["metadata"]["namespace"],
        name=qm["metadata"]["name"],
        phase=str(status.get("phase", "Unknown")),
        generation=int(qm["metadata"].get("generation", 0)),
        observed_generation=status.get("observedGeneration"),
        conditions=list(status.get("conditions") or []),
        limits=limits,
        protection=dict(status.get("protection") or {}),
        autoscaling=dict(status["autoscaling"]) if status.get("autoscaling") else None,
    )


def replica_from_metrics(pod: str, text: str) -> Replica:
    """A replica's numbers from its pod's merged /metrics (the gate's series, then the engine's)."""
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    engine: dict[str, list[Series]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(PREFIX):
                engine.setdefault(sample.name, []).append((scheduler_of(sample.labels), float(sample.value)))
                continue
            if (
                sample.name == "kvant_gate_rejected_total"
                and sample.labels.get("reason") not in GATE_BUSY_REASONS
            ):
                continue
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            maxima[sample.name] = max(maxima.get(sample.name, 0.0), float(sample.value))
    token_usage = combine(TOKEN_USAGE, engine.get(TOKEN_USAGE, []))
    return Replica(
        pod=pod,
        token_usage=token_usage,
        running=combine(NUM_RUNNING_REQS, engine.get(NUM_RUNNING_REQS, [])),
        queued_engine=combine(NUM_QUEUE_REQS, engine.get(NUM_QUEUE_REQS, [])),
        # No counter yet while the engine answers: nothing retracted so far.
        retracted=(
            retractions_total(engine.get(NUM_RETRACTED_REQUESTS_TOTAL, []))
            if token_usage is not None
            else None
        ),
        turned_away=sums.get("kvant_gate_rejected_total"),
        queued_gate=sums.get("kvant_gate_queue_length"),
        concurrency=maxima.get("kvant_gate_effective_concurrency"),
    )


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
    return "\n".join(lines)


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
