"""The gate's own Prometheus metrics, all named `kvant_gate_*`, in a registry per gate.

State gauges (queue, in-flight, limits) are read from the admission state at scrape time,
so the request path pays only for the counters and the wait histogram.

Per-tenant series (`kvant_gate_tenant_*`) have bounded cardinality: only the TOP_TENANTS tenants by
admitted tokens get their own `tenant` label value, the rest count as "other"
(kvant_contracts.tenancy). The label is chosen as each count is made, so every series only grows; a
tenant that drops out of the top has its series removed (they end, as a restarted gate's do) and
counts as "other" from then on. Summed over `tenant`, the rates are the whole gate's.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kvant_contracts.autoscaling import DEMAND_GAUGE
from kvant_contracts.limits import MODES
from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_contracts.sglang_metrics import TOKEN_USAGE
from kvant_contracts.tenancy import OTHER_TENANTS, PRIORITIES, TOP_TENANTS, Priority
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.prompt_counter import SHAPES, PromptCounter

# Tenants whose admitted tokens are remembered for the ranking, at most; past it the smallest are
# forgotten (they were far from the top), so a gateway naming endless tenants cannot grow the gate.
MAX_RANKED_TENANTS = 10_000
# Queue waits run from 0 (admitted at once) up to queueTimeoutSeconds (30 s by default).
WAIT_BUCKETS = (0.0, 0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

CONFIGURED_LIMIT_FIELDS: dict[str, Callable[[Admission], float]] = {
    "maxConcurrency": lambda a: a.limits.maxConcurrency,
    "maxQueued": lambda a: a.limits.maxQueued,
    "queueTimeoutSeconds": lambda a: a.limits.queueTimeoutSeconds,
    "targetTokenUsage": lambda a: a.limits.targetTokenUsage,
    "maxRetractionsPerMinute": lambda a: a.limits.maxRetractionsPerMinute,
    "concurrency.min": lambda a: a.limits.concurrency.min,
    "concurrency.max": lambda a: a.limits.concurrency.max,
    "maxRequestBytes": lambda a: a.limits.maxRequestBytes,
}


class GateMetrics:
    """Counters the gate increments, plus gauges bound to the live admission state."""

    def __init__(self, admission: Admission) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.admitted = Counter("kvant_gate_admitted", "Requests admitted to the engine.", registry=r)
        self.rejected = Counter(
            "kvant_gate_rejected", "Requests the gate answered itself, by reason.", ["reason"], registry=r
        )
        for reason in GATE_BUSY_REASONS:  # at 0 from the start, so a rate over them is 0, not absent
            self.rejected.labels(reason)
        self.over_limit = Counter(
            "kvant_gate_observed_over_limit",
            "observe mode: requests admitted that enforce would have queued, by limit.",
            ["limit"],
            registry=r,
        )
        self.prompt_counts = Counter(
            "kvant_gate_prompt_counts",
            "Chat prompts counted, by who counted them: the engine's own /v1/tokenize, or the gate's "
            "counter when the engine could not answer.",
            ["by"],
            registry=r,
        )
        for by in ("engine", "gate"):
            self.prompt_counts.labels(by)
        self.queue_wait = Histogram(
            "kvant_gate_queue_wait_seconds",
            "Time admitted requests spent in the queue (0 when admitted at once).",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.concurrency_changes = Counter(
            "kvant_gate_concurrency_changes",
            "Moves of the effective concurrency by the local loop, by direction and signal.",
            ["direction", "signal"],
            registry=r,
        )
        self.limits_reloads = Counter(
            "kvant_gate_limits_reloads",
            "Limits reloads (from the file or the API), by result (ok|error).",
            ["result"],
            registry=r,
        )
        self.limits_valid = Gauge(
            "kvant_gate_limits_valid",
            "1 when the latest limits document is valid, 0 when the last good limits are in use.",
            registry=r,
        )
        self.limits_valid.set(1)
        self.limits_source = Gauge(
            "kvant_gate_limits_source",
            "1 for where the limits in force came from: api (the ConfigMap, watched) or file (the mount).",
            ["source"],
            registry=r,
        )
        self.engine_metrics_stale = Gauge(
            "kvant_gate_engine_metrics_stale",
            "1 when the last scrape of the engine's /metrics failed (counted as saturated).",
            registry=r,
        )
        self.engine_token_usage = Gauge(
            "kvant_gate_engine_token_usage", f"{TOKEN_USAGE} as last read by the gate (0..1).", registry=r
        )
        self.tenants = TenantSeries(r, admission)
        self._bind_state(admission)

    def _bind_state(self, admission: Admission) -> None:
        r = self.registry
        Gauge("kvant_gate_queue_length", "Requests waiting in the gate's queue.", registry=r).set_function(
            lambda: admission.queue_length
        )
        Gauge(
            "kvant_gate_in_flight_requests", "Requests admitted and not yet finished.", registry=r
        ).set_function(lambda: admission.in_flight)
        Gauge(
            "kvant_gate_in_flight_tokens",
            "Σ (estimated prompt tokens + max new tokens) over in-flight requests.",
            registry=r,
        ).set_function(lambda: admission.in_flight_tokens)
        Gauge(
            "kvant_gate_effective_concurrency",
            "The concurrency limit the local loop applies now.",
            registry=r,
        ).set_function(lambda: admission.concurrency)
        Gauge(
            "kvant_gate_token_budget",
            "Tokens in flight the gate admits: the engine's max_total_num_tokens less the estimate's "
            "headroom; 0 while the capacity is unknown.",
            registry=r,
        ).set_function(lambda: admission.token_budget or 0)
        Gauge(
            "kvant_gate_engine_max_total_num_tokens",
            "The engine's KV capacity in tokens as the gate knows it; 0 while unknown.",
            registry=r,
        ).set_function(lambda: admission.token_capacity or 0)
        Gauge(
            DEMAND_GAUGE,
            "What this replica is asked to hold over what it may hold now: the larger of in-flight plus "
            "queued KV tokens over the token budget and in-flight plus queued requests over the effective "
            "concurrency. 1 is exactly full; above 1 requests wait or are refused.",
            registry=r,
        ).set_function(lambda: admission.demand)
        configured = Gauge(
            "kvant_gate_configured_limit", "The limits file's values, by field name.", ["field"], registry=r
        )
        for name, read in CONFIGURED_LIMIT_FIELDS.items():
            configured.labels(name).set_function(functools.partial(read, admission))
        mode = Gauge("kvant_gate_mode", "1 for the limits file's current mode.", ["mode"], registry=r)
        for name in MODES:
            mode.labels(name).set_function(functools.partial(_mode_is, admission, name))


class TenantSeries:
    """The per-tenant counters and the queued gauge, labelled by the top tenants plus "other"."""

    def __init__(self, registry: CollectorRegistry, admission: Admission) -> None:
        self.admitted_tokens = Counter(
            "kvant_gate_tenant_admitted_tokens",
            "KV tokens admitted (prompt + reserved output), by tenant (the top tenants; the rest 'other') "
            "and priority class.",
            ["tenant", "priority"],
            registry=registry,
        )
        self.rejected = Counter(
            "kvant_gate_tenant_rejected",
            "Requests the gate answered itself, by tenant (the top tenants; the rest 'other'), priority "
            "class and reason.",
            ["tenant", "priority", "reason"],
            registry=registry,
        )
        # "other" at 0 from the start, as kvant_gate_rejected's busy reasons are: a rate over them is 0,
        # not absent, so every dashboard and alert query finds its series before the first request.
        for priority in PRIORITIES:
            self.admitted_tokens.labels(OTHER_TENANTS, priority)
            for reason in GATE_BUSY_REASONS:
                self.rejected.labels(OTHER_TENANTS, priority, reason)
        self._totals: dict[str, float] = {}  # admitted tokens per tenant: the ranking
        self.top: set[str] = set()
        self._series: dict[str, set[tuple[str, ...]]] = {}  # per labelled tenant: its rejected series
        registry.register(_QueuedByTenant(admission, self))

    def label(self, tenant: str) -> str:
        return tenant if tenant in self.top else OTHER_TENANTS

    def admitted(self, tenant: str, priority: Priority, tokens: int) -> None:
        self._totals[tenant] = self._totals.get(tenant, 0.0) + tokens
        self._rank(tenant)
        self.admitted_tokens.labels(self.label(tenant), priority).inc(tokens)

    def refused(self, tenant: str, priority: Priority, reason: str) -> None:
        label = self.label(tenant)
        if label != OTHER_TENANTS:
            self._series.setdefault(label, set()).add((priority, reason))
        self.rejected.labels(label, priority, reason).inc()

    def _rank(self, tenant: str) -> None:
        if tenant in self.top:
            return
        if len(self.top) < TOP_TENANTS:
            self.top.add(tenant)
            return
        weakest = min(self.top, key=lambda name: self._totals.get(name, 0.0))
        if self._totals[tenant] <= self._totals.get(weakest, 0.0):
            if len(self._totals) > MAX_RANKED_TENANTS:
                self._forget_smallest()
            return
        self.top.discard(weakest)
        self.top.add(tenant)
        for priority in PRIORITIES:
            self._remove(self.admitted_tokens, weakest, priority)
        for labels in self._series.pop(weakest, set()):
            self._remove(self.rejected, weakest, *labels)

    def _forget_smallest(self) -> None:
        keep = sorted(self._totals, key=self._totals.__getitem__, reverse=True)[: MAX_RANKED_TENANTS // 2]
        self._totals = {name: self._totals[name] for name in {*keep, *self.top}}

    @staticmethod
    def _remove(counter: Counter, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # that series was never made
            counter.remove(*labels)


class _QueuedByTenant(Collector):
    """kvant_gate_tenant_queued at scrape time: the queue by labelled tenant and class, 0s included."""

    def __init__(self, admission: Admission, tenants: TenantSeries) -> None:
        self.admission, self.tenants = admission, tenants

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kvant_gate_tenant_queued",
            "Requests waiting in the gate's queue, by tenant (the top tenants; the rest 'other') and "
            "priority class.",
            labels=["tenant", "priority"],
        )
        # Every labelled tenant and class, at 0 when none waits: a series that comes and goes with the
        # queue would read as missing data on a dashboard.
        counts: dict[tuple[str, str], int] = {
            (label, klass): 0 for label in (*self.tenants.top, OTHER_TENANTS) for klass in PRIORITIES
        }
        for (tenant, klass), queued in self.admission.queued_by_tenant().items():
            key = (self.tenants.label(tenant), klass)
            counts[key] = counts.get(key, 0) + queued
        for labels, queued in sorted(counts.items()):
            family.add_metric(list(labels), queued)
        yield family


def bind_forecast(metrics: GateMetrics, forecast: OutputForecast, admission: Admission) -> None:
    """Gauges over the output forecast: what a sequence is forecast to generate, and the correction."""
    Gauge(
        "kvant_gate_output_forecast_tokens",
        "Output tokens a sequence reserves: the mean it is forecast to generate; 0 until learned.",
        registry=metrics.registry,
    ).set_function(forecast.shown_tokens)
    Gauge(
        "kvant_gate_output_forecast_margin_tokens",
        "KV tokens the budget keeps free for the spread of the in-flight answers' total (forecast).",
        registry=metrics.registry,
    ).set_function(lambda: admission.margin(admission.in_flight_sequences))
    Gauge(
        "kvant_gate_output_forecast_widen",
        "The live signals' correction of the forecast (1: none; more after engine pressure).",
        registry=metrics.registry,
    ).set_function(lambda: forecast.widen)


def _mode_is(admission: Admission, mode: str) -> float:
    return float(admission.limits.mode == mode)


def bind_prompt_counter(metrics: GateMetrics, counter: PromptCounter) -> None:
    """Whether prompts are counted with the model's tokenizer, and the bytes estimate's learned scale."""
    Gauge(
        "kvant_gate_prompt_tokenizer_exact",
        "1: prompts are counted with the model's own tokenizer; 0: estimated from bytes.",
        registry=metrics.registry,
    ).set(1 if counter.exact else 0)
    scale = Gauge(
        "kvant_gate_prompt_estimate_scale",
        "The bytes estimate's correction learned from the engine's reported prompt tokens, by request "
        "shape (text or chat; 1 when exact).",
        ["shape"],
        registry=metrics.registry,
    )
    for shape in SHAPES:
        scale.labels(shape).set_function(functools.partial(_learned_scale, counter, shape))


def _learned_scale(counter: PromptCounter, shape: str) -> float:
    """The estimate's correction for `shape`; 1 for an exact counter, which learns none."""
    scales: dict[str, float] = getattr(counter, "scales", {})
    return float(scales.get(shape, 1.0))
