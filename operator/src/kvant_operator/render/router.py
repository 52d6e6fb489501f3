"""The router role: the SGLang Model Gateway (`smg`) in front of a model's gates.

With several replicas (or prefill/decode) a model needs one front door that knows its engines:
smg discovers the engine pods by label (`kvant.dev/component=engine`, the kind every engine role
carries), routes to their gates' port with the spec's policy (cache_aware keeps repeated prefixes
where they are cached), leaves out a worker whose KV usage reaches `protection.targetTokenUsage`
(so it steers away before a gate must refuse), and retries a refused request on another replica.
Kvant writes none of that; it renders smg's command line, validated by smg's own parser in a test.

Objects: a Deployment (its own ServiceAccount, the only Kvant pods with an API token), a PDB, and a
Role allowing get, list and watch on pods in the model's namespace, bound to that account. The
model's Service selects the router instead of the engines while the router is on.
"""

from __future__ import annotations

from kvant_contracts.serving_pod import GATE_PORT, METRICS_PORT
from kvant_operator.api.spec import DisaggregationMode, QuantizedModelSpec
from kvant_operator.render.meta import MODEL_LABEL, ROLE_LABEL, Obj, object_meta
from kvant_operator.render.pod_security import restricted
from kvant_operator.render.roles import (
    KIND_LABEL,
    Role,
    RoleKind,
    disruption_budget,
    role_deployment,
    workload_name,
)
from kvant_operator.settings import OperatorSettings

ROUTER = "router"
METRICS_PORT_NAME = "metrics"
# Retries stay well inside a client's deadline: a refused request moves to another replica within
# ~1 s, and the client sees 429 only when every replica refused.
RETRIES = ["--retry-max-retries", "3", "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "500"]


def router_enabled(spec: QuantizedModelSpec) -> bool:
    serving = spec.serving
    if serving.router.enabled is not None:
        return serving.router.enabled
    return serving.replicas > 1 or serving.disaggregation.mode is DisaggregationMode.PREFILL_DECODE


def router_role(spec: QuantizedModelSpec) -> Role | None:
    if not router_enabled(spec):
        return None
    return Role(ROUTER, RoleKind.ROUTER, spec.serving.router.replicas, spec.kv_cache.dtype, [])


def router_args(model: str, namespace: str, spec: QuantizedModelSpec) -> list[str]:
    """`smg launch ...` for this model; tests parse it with smg's own parser."""
    engines = f"{MODEL_LABEL}={model}"
    args = ["launch", "--host", "0.0.0.0", "--port", str(GATE_PORT)]
    args += ["--service-discovery", "--service-discovery-namespace", namespace]
    args += ["--service-discovery-port", str(GATE_PORT)]
    if spec.serving.disaggregation.mode is DisaggregationMode.PREFILL_DECODE:
        args += ["--pd-disaggregation"]
        args += ["--prefill-selector", engines, f"{ROLE_LABEL}=prefill"]
        args += ["--decode-selector", engines, f"{ROLE_LABEL}=decode"]
    else:
        args += ["--selector", engines, f"{KIND_LABEL}={RoleKind.ENGINE.value}"]
    args += ["--policy", spec.serving.router.policy.value]
    args += ["--worker-overload-token-usage", str(spec.protection.target_token_usage)]
    args += RETRIES
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT)]
    return args


def router_objects(body: Obj, spec: QuantizedModelSpec, settings: OperatorSettings) -> list[Obj]:
    role = router_role(spec)
    if role is None:
        return []
    model, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    name = workload_name(model, role)
    return [
        _account(body, name),
        _pod_reader(body, name),
        _binding(body, name),
        _deployment(body, settings, role, router_args(model, namespace, spec)),
        disruption_budget(body, role),
    ]


def _meta(body: Obj, name: str) -> Obj:
    meta = object_meta(body, name, "serving")
    meta["labels"][KIND_LABEL] = RoleKind.ROUTER.value
    return meta


def _account(body: Obj, name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(body, name)}


def _pod_reader(body: Obj, name: str) -> Obj:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(body, name),
        "rules": [rule],
    }


def _binding(body: Obj, name: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(body, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": body["metadata"]["namespace"]}],
    }


def _deployment(body: Obj, settings: OperatorSettings, role: Role, args: list[str]) -> Obj:
    name = workload_name(body["metadata"]["name"], role)
    model = body["metadata"]["name"]
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    container = {
        "name": ROUTER,
        "image": settings.runtime_image,
        "command": ["smg"],
        "args": args,
        "ports": [
            {"name": "http", "containerPort": GATE_PORT},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT},
        ],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
    }
    pod = restricted({"containers": [container], "serviceAccountName": name})
    pod["automountServiceAccountToken"] = True  # smg watches the engine pods through the API
    meta = _meta(body, name)
    meta["labels"].update(role.labels(model))
    return role_deployment(meta, role, model, pod, {"prometheus.io/scrape": "true"})
