"""Each model's NetworkPolicy: who may reach its pods, and on which port.

Defence in depth behind the gate (the engine already listens on the pod's loopback): the serving
port is open to the namespaces the chart names (`networkPolicy.servingFrom`, any source when empty),
the metrics port to the monitoring namespaces and the operator's own (its protection loop scrapes
the pods when no Prometheus is configured), and the model's pods may reach each other on any port
(prefill and decode exchange KV caches). Nothing else gets in. It is enforced by the cluster's
network plugin; the local test cluster has none, so there it is rendered and validated, not enforced.
"""

from __future__ import annotations

from kvant_contracts.serving_pod import GATE_PORT, METRICS_PORT
from kvant_operator.render.meta import MODEL_LABEL, Obj, object_meta
from kvant_operator.render.roles import KIND_LABEL, RoleKind
from kvant_operator.settings import OperatorSettings

NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set on every namespace by the API server


def network_policy(body: Obj, settings: OperatorSettings) -> Obj:
    model = body["metadata"]["name"]
    serving: Obj = {"ports": [{"protocol": "TCP", "port": GATE_PORT}]}
    if settings.serving_from:
        serving["from"] = [_namespaces(settings.serving_from)]
    metrics_from = sorted({*settings.metrics_from, settings.operator_namespace})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(body, model, "serving"),
        "spec": {
            "podSelector": {"matchLabels": {MODEL_LABEL: model, KIND_LABEL: RoleKind.ENGINE.value}},
            "policyTypes": ["Ingress"],
            "ingress": [
                serving,
                {"ports": [{"protocol": "TCP", "port": METRICS_PORT}], "from": [_namespaces(metrics_from)]},
                {"from": [{"podSelector": {"matchLabels": {MODEL_LABEL: model}}}]},
            ],
        },
    }


def _namespaces(names: tuple[str, ...] | list[str]) -> Obj:
    selector = {"matchExpressions": [{"key": NAMESPACE_NAME, "operator": "In", "values": list(names)}]}
    return {"namespaceSelector": selector}
