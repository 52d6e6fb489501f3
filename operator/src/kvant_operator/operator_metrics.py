"""The operator's own Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

RECONCILES = Counter(
    "kvant_operator_reconciles_total", "Reconciles of QuantizedModels, by result.", ["result"]
)
RECONCILE_SECONDS = Histogram("kvant_operator_reconcile_duration_seconds", "Time one reconcile takes.")
PENDING = Gauge(
    "kvant_operator_pending_reconciles", "Models woken by a change and waiting for their reconcile."
)
MODELS = Gauge("kvant_operator_models", "Managed QuantizedModels, by phase.", ["phase"])
API_REQUESTS = Counter(
    "kvant_operator_api_requests_total",
    "Requests Kvant's own code sent to the API server, by HTTP method.",
    ["method"],
)
PROTECTION_DECISIONS = Counter(
    "kvant_operator_protection_decisions_total",
    "Protection decisions that changed a limit, by direction.",
    ["direction"],
)
for _direction in ("down", "up"):  # at 0 from the start, so dashboards and rates see the series
    PROTECTION_DECISIONS.labels(_direction)


_STATUSES = ("True", "False", "Unknown")


class _ModelConditions:
    """kvant_operator_model_condition, written out at scrape time from each model's last conditions.
    As gauge children it was 27 series per model, each with its own lock: ~23 MiB at 1,000 models,
    and 27 label look-ups per reconcile. Here a model costs one small dict."""

    def __init__(self) -> None:
        # (namespace, model) → {condition type: status}; replaced whole, so a scrape in the metrics
        # thread never sees a half-written model.
        self.models: dict[tuple[str, str], dict[str, str]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kvant_operator_model_condition",
            "1 for the current status of each condition of each model (the alerts read Stalled, "
            "Reconciling and CacheProtected from it).",
            labels=["namespace", "model", "condition", "status"],
        )
        for (namespace, model), conditions in list(self.models.items()):
            for condition, current in conditions.items():
                for status in _STATUSES:
                    value = 1.0 if current == status else 0.0
                    family.add_metric([namespace, model, condition, status], value)
        yield family


MODEL_CONDITIONS = _ModelConditions()
REGISTRY.register(MODEL_CONDITIONS)


def publish_conditions(namespace: str, model: str, conditions: list[dict[str, Any]]) -> None:
    """One series per (condition, status), 1 for the current status and 0 for the others; a condition
    the model no longer has is no longer reported."""
    MODEL_CONDITIONS.models[(namespace, model)] = {str(c["type"]): str(c.get("status")) for c in conditions}


class _ModelReplicas:
    """kvant_operator_model_replicas, written out at scrape time like the conditions above: the
    replicas of each autoscaled model as its autoscaler reports them (KvantAtMaxReplicasAndShedding
    and the dashboard's Replicas panel read it). A model without spec.autoscaling has no series, so
    "at max" is never read off a model nobody scales."""

    STATES = ("current", "desired", "min", "max")

    def __init__(self) -> None:
        # (namespace, model) → the value of each state, in STATES' order; replaced whole (as above).
        self.models: dict[tuple[str, str], tuple[int, int, int, int]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kvant_operator_model_replicas",
            "Replicas of each autoscaled model, by state: current and desired (its autoscaler's), "
            "min and max (spec.autoscaling in force).",
            labels=["namespace", "model", "state"],
        )
        for (namespace, model), values in list(self.models.items()):
            for state, value in zip(self.STATES, values, strict=True):
                family.add_metric([namespace, model, state], float(value))
        yield family


MODEL_REPLICAS = _ModelReplicas()
REGISTRY.register(MODEL_REPLICAS)


def publish_replicas(
    namespace: str, model: str, *, current: int, desired: int, minimum: int, maximum: int
) -> None:
    """One series per state (current, desired, min, max) of an autoscaled model. The counts are
    keyword-only: four ints in a row are too easily passed in the wrong order."""
    MODEL_REPLICAS.models[(namespace, model)] = (current, desired, minimum, maximum)


def forget_replicas(namespace: str, model: str) -> None:
    """Drops a model's replica series: its spec.autoscaling is gone, so nothing scales it."""
    MODEL_REPLICAS.models.pop((namespace, model), None)


def forget_model(namespace: str, model: str) -> None:
    MODEL_CONDITIONS.models.pop((namespace, model), None)
    forget_replicas(namespace, model)


def serve(host: str, port: int) -> None:
    start_http_server(port, addr=host)
