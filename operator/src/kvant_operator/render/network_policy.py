"""Each model's NetworkPolicy: who may reach its pods, and on which port.

Defence in depth behind the gate (the engine already listens on the pod's loopback): the serving
port is open to the namespaces the chart names (`networkPolicy.servingFrom`, any source when empty),
the metrics port to the monitoring namespaces and the operator's own (its protection loop scrapes
the pods when no Prometheus is configured), and the model's pods may reach each other on any port
(prefill and decode exchange KV caches; the router reaches the gates). With a router, the serving port
is the router's, and the engines take serving traffic from the model's own pods only. Nothing else
gets in. It is enforced by the cluster's
network plugin; the local test cluster has none, so there it is rendered and validated, not enforced.
"""

from __future__ import annotations

from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import GATE_PORT, METRICS_PORT
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL, SERVING_COMPONENT
from kvant_operator.render.meta import object_meta
from kvant_operator.render.roles import Role, RoleKind, workload_name
from kvant_operator.render.router import MESH_PORT
from kvant_operator.settings import OperatorSettings

NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set on every namespace by the API server


def network_policies(body: Obj, settings: OperatorSettings, router: Role | None) -> list[Obj]:
    """The engines' policy and, with a router, the router's. A routed model's engines take serving
    traffic from the model's own pods only: a client that went around the router could otherwise
    name any `bootstrap_host` in a request body and have a decode engine connect to it."""
    model = body["metadata"]["name"]
    serving: Obj = {"ports": [{"protocol": "TCP", "port": GATE_PORT}]}
    if settings.serving_from:
        serving["from"] = [_namespaces(settings.serving_from)]
    metrics_from = sorted({*settings.metrics_from, settings.operator_namespace})
    metrics = {"ports": [{"protocol": "TCP", "port": METRICS_PORT}], "from": [_namespaces(metrics_from)]}
    own_pods = {"from": [{"podSelector": {"matchLabels": {MODEL_LABEL: model}}}]}
    engines = _policy(
        body, model, RoleKind.ENGINE, [metrics, own_pods] if router else [serving, metrics, own_pods]
    )
    if router is None:
        return [engines]
    # The router replicas' smg mesh (render/router.py) is for each other only.
    mesh_peers = {"podSelector": {"matchLabels": {MODEL_LABEL: model, KIND_LABEL: RoleKind.ROUTER.value}}}
    mesh = {"ports": [{"protocol": "TCP", "port": MESH_PORT}], "from": [mesh_peers]}
    return [engines, _policy(body, workload_name(model, router), RoleKind.ROUTER, [serving, metrics, mesh])]


def _policy(body: Obj, name: str, kind: RoleKind, ingress: list[Obj]) -> Obj:
    model = body["metadata"]["name"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(body, name, SERVING_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": {MODEL_LABEL: model, KIND_LABEL: kind.value}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def _namespaces(names: tuple[str, ...] | list[str]) -> Obj:
    selector = {"matchExpressions": [{"key": NAMESPACE_NAME, "operator": "In", "values": list(names)}]}
    return {"namespaceSelector": selector}
