"""The operator's own Prometheus metrics."""

from __future__ import annotations

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


def serve(host: str, port: int) -> None:
    start_http_server(port, addr=host)
