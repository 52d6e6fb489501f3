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
from kvant_contracts.tenancy import PRIORITIES, as_priority, rank

Obj = dict[str, Any]
_BARS = "▁▂▃▄▅▆▇█"
# The gate's per-tenant series (kvant_runtime.gate.gate_metrics.TenantSeries), as exposed: counters
# carry `_total`. Each gate labels its own top tenants and counts the rest as "other".
TENANT_ADMITTED_TOKENS = "kvant_gate_tenant_admitted_tokens_total"
TENANT_REJECTED = "kvant_gate_tenant_rejected_total"
TENANT_QUEUED = "kvant_gate_tenant_queued"
# Rows of the tenants table: as many as one gate names tenants (TOP_TENANTS), so the screen stays short.
TENANT_ROWS = 10
# The run of status.plan that the phase is waiting on (api.status.PlanStatus's CalibratedRun fields):
# GPTQ is the conversion's long part, calibration the calibration Job's whole.
PLANNED_RUNS = {"Converting": ("gptq", "GPTQ"), "Calibrating": ("calibration", "calibration")}


@dataclass
class TenantLoad:
    """One tenant in one priority class, on one replica or summed over a model's replicas."""

    tenant: str
    priority: str
    admitted_tokens: float = 0.0  # since the gate started
    queued: float = 0.0  # waiting at the gate now
    refused: dict[str, float] = field(default_factory=dict)  # by reason, since the gate started

    @property
    def refused_total(self) -> float:
        return sum(self.refused.values())

    @property
    def idle(self) -> bool:
        """Nothing admitted, queued or refused: one of the gate's series at 0 from its start."""
        return not (self.admitted_tokens or self.queued or self.refused_total)


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
    # Per (tenant, class); empty from gates without tenant series. Shown summed over the replicas
    # (ModelStatus.tenants), not per replica.
    tenants: list[TenantLoad] = field(default_factory=list)


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
    # The plan's estimate for the run the phase waits on (PLANNED_RUNS).
    planned_run: Obj | None = None
    replicas: list[Replica] = field(default_factory=list)
    usage_history: list[float] = field(default_factory=list)  # worst replica, last 15 minutes
    retractions_window: str = "since the engine started"

    @property
    def tenants(self) -> list[TenantLoad]:
        """The busiest tenants over all replicas: the most refused first, then the most admitted."""
        return top_tenants(self.replicas)

    def to_json(self) -> Obj:
        data = asdict(self)
        for replica in data["replicas"]:
            del replica["tenants"]  # the model's sum below says it once
        data["tenants"] = [{**asdict(t), "refused_total": t.refused_total} for t in self.tenants]
        return data


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
    phase = str(status.get("phase", "Unknown"))
    field_name, _ = PLANNED_RUNS.get(phase, ("", ""))
    run = (status.get("plan") or {}).get(field_name) if field_name else None
    return ModelStatus(
        namespace=qm["metadata"]["namespace"],
        name=qm["metadata"]["name"],
        phase=phase,
        generation=int(qm["metadata"].get("generation", 0)),
        observed_generation=status.get("observedGeneration"),
        conditions=list(status.get("conditions") or []),
        limits=limits,
        protection=dict(status.get("protection") or {}),
        autoscaling=dict(status["autoscaling"]) if status.get("autoscaling") else None,
        planned_run=dict(run) if run else None,
    )


def replica_from_metrics(pod: str, text: str) -> Replica:
    """A replica's numbers from its pod's merged /metrics (the gate's series, then the engine's)."""
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    engine: dict[str, list[Series]] = {}
    tenants: dict[tuple[str, str], TenantLoad] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (TENANT_ADMITTED_TOKENS, TENANT_REJECTED, TENANT_QUEUED):
                _add_tenant_sample(tenants, sample.name, sample.labels, float(sample.value))
                continue
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
        tenants=list(tenants.values()),
    )


def _add_tenant_sample(
    tenants: dict[tuple[str, str], TenantLoad], name: str, labels: dict[str, str], value: float
) -> None:
    key = (labels.get("tenant", ""), labels.get("priority", ""))
    load = tenants.setdefault(key, TenantLoad(*key))
    if name == TENANT_ADMITTED_TOKENS:
        load.admitted_tokens += value
    elif name == TENANT_QUEUED:
        load.queued += value
    else:
        reason = labels.get("reason", "")
        load.refused[reason] = load.refused.get(reason, 0.0) + value


def top_tenants(replicas: list[Replica], rows: int = TENANT_ROWS) -> list[TenantLoad]:
    """Each (tenant, class) summed over the replicas, idle ones left out: the most refused first, then
    the most admitted tokens, at most `rows`. A tenant outside one gate's top counts as "other" there,
    so its numbers may be split between its own row and "other"."""
    summed: dict[tuple[str, str], TenantLoad] = {}
    for replica in replicas:
        for load in replica.tenants:
            total = summed.setdefault((load.tenant, load.priority), TenantLoad(load.tenant, load.priority))
            total.admitted_tokens += load.admitted_tokens
            total.queued += load.queued
            for reason, count in load.refused.items():
                total.refused[reason] = total.refused.get(reason, 0.0) + count
    busy = [t for t in summed.values() if not t.idle]
    busy.sort(key=lambda t: (-t.refused_total, -t.admitted_tokens, _class_rank(t.priority), t.tenant))
    return busy[:rows]


def _class_rank(priority: str) -> int:
    known = as_priority(priority)
    return rank(known) if known is not None else len(PRIORITIES)


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
