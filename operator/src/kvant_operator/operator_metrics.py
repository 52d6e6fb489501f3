"""The operator's own Prometheus metrics."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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


MODEL_CONDITION = Gauge(
    "kvant_operator_model_condition",
    "1 for the current status of each condition of each model (the alerts read Stalled, Reconciling "
    "and CacheProtected from it).",
    ["namespace", "model", "condition", "status"],
)
_STATUSES = ("True", "False", "Unknown")
_published: dict[tuple[str, str], set[str]] = {}


def publish_conditions(namespace: str, model: str, conditions: list[dict[str, Any]]) -> None:
    """One series per (condition, status), 1 for the current status and 0 for the others."""
    types = {str(c["type"]) for c in conditions}
    for stale in _published.get((namespace, model), set()) - types:
        _remove(namespace, model, stale)
    for condition in conditions:
        for status in _STATUSES:
            labels = (namespace, model, str(condition["type"]), status)
            MODEL_CONDITION.labels(*labels).set(1.0 if condition.get("status") == status else 0.0)
    _published[(namespace, model)] = types


def forget_model(namespace: str, model: str) -> None:
    for condition in _published.pop((namespace, model), set()):
        _remove(namespace, model, condition)


def _remove(namespace: str, model: str, condition: str) -> None:
    for status in _STATUSES:
        with contextlib.suppress(KeyError):
            MODEL_CONDITION.remove(namespace, model, condition, status)


def serve(host: str, port: int) -> None:
    start_http_server(port, addr=host)
