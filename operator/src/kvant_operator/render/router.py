"""The router role: the SGLang Model Gateway (`smg`) in front of a model's gates.

smg does the routing: it discovers the engine pods by label (`kvant.dev/component=engine`, the kind
every engine role carries), routes to their gates' port with the spec's policy, leaves out a worker
whose KV usage reaches `protection.targetTokenUsage` and retries a refused request on another replica.
Kvant writes none of that; it renders smg's command line, validated by smg's own parser in a test,
and the objects around it: a Deployment, a PDB, the router's API identity (`render.api_identity`: a
ServiceAccount whose Role allows get, list and watch on pods in the model's namespace, its token
mounted into the router container) and, for several replicas, the headless Service `<router>-mesh`
(not-ready addresses published, so replicas starting together can join) through which smg's mesh peers
find each other. The model's Service selects the router instead of the engines while the router is on.
See docs/concepts/router.md ("What it is").
"""

from __future__ import annotations

from kvant_contracts.drain import DRAIN_CEILING_SECONDS, POD_TERMINATION_GRACE_SECONDS
from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import ENGINE_PROBE_TIMEOUT_SECONDS, GATE_PORT, METRICS_PORT
from kvant_operator.api.placement import PlacementSpec
from kvant_operator.api.spec import DisaggregationMode, QuantizedModelSpec
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL, ROLE_LABEL, SERVING_COMPONENT
from kvant_operator.render.api_identity import api_access_mount, api_access_volume, api_identity
from kvant_operator.render.meta import object_meta
from kvant_operator.render.pod_placement import placement
from kvant_operator.render.pod_security import restricted
from kvant_operator.render.roles import Role, RoleKind, disruption_budget, role_deployment, workload_name
from kvant_operator.settings import OperatorSettings

ROUTER = "router"
API_ACCESS = "api-access"
METRICS_PORT_NAME = "metrics"
MESH_PORT = 39527  # smg's default --mesh-port
# Retries stay well inside a client's deadline: a refused request moves to another replica within
# ~1 s, and the client sees 429 only when every replica refused.
RETRIES = ["--retry-max-retries", "3", "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "500"]
# How often smg retries the health check of a discovered, Ready engine pod before it joins the pool.
WORKER_STARTUP_CHECK_SECONDS = 3
# smg's probe paths: /readiness answers 503 while no engine is healthy in its pool; /health always 200.
ROUTER_READINESS_PATH = "/readiness"
ROUTER_LIVENESS_PATH = "/health"


def router_enabled(spec: QuantizedModelSpec) -> bool:
    serving = spec.serving
    if serving.router.enabled is not None:
        return serving.router.enabled
    # An autoscaled model that may grow past one replica has the router from the start: switching the
    # model's Service from the one engine to the router as the autoscaler adds the second replica would
    # move every client at the busiest moment.
    scaling = spec.autoscaling
    return (
        serving.replicas > 1
        or (scaling is not None and scaling.max_replicas > 1)
        or serving.disaggregation.mode is DisaggregationMode.PREFILL_DECODE
    )


def meshed(replicas: int) -> bool:
    """Several router replicas share their prefix trees through smg's mesh; one has nobody to tell."""
    return replicas > 1


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
    # smg health-checks each worker's /health, which the gate passes to SGLang's own (1-20 s): its 5 s
    # default would drop a busy engine from the pool.
    args += ["--health-check-timeout-secs", str(ENGINE_PROBE_TIMEOUT_SECONDS)]
    # smg adds a discovered pod once it is Ready, after a health check that is retried every
    # --worker-startup-check-interval (30 s by default): one check missed by a busy engine left a new
    # replica out of the pool for 30-60 s (the real-engine autoscaling e2e timed out waiting for it to
    # take traffic). The pod is Ready, so checking every few seconds costs one /health each.
    args += ["--worker-startup-check-interval", str(WORKER_STARTUP_CHECK_SECONDS)]
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT)]
    # A leaving router drops nothing: on SIGTERM smg answers 503 on its readiness path, keeps
    # accepting for min(grace / 2, 5 s) while the Service drops it, then waits for the answers it
    # carries for the rest of the grace. Those are as long as the engines' answers, so it gets the
    # gate's drain ceiling (smg's default is 180 s, and the pod's default grace 30 s cut any answer
    # longer than ~25 s); an idle router still leaves after the 5 s.
    args += ["--shutdown-grace-period-secs", str(DRAIN_CEILING_SECONDS)]
    if meshed(spec.serving.router.replicas):  # the peers: see router_command
        args += ["--enable-mesh", "--mesh-server-name", "$(POD_NAME)", "--mesh-port", str(MESH_PORT)]
        args += ["--mesh-host", "0.0.0.0", "--mesh-advertise-host", "$(POD_IP)"]
    return args


def router_command(model: str, role: Role, args: list[str]) -> tuple[list[str], list[str]]:
    """The container's command and args: smg itself, or with a mesh `kvant router`, which finds the
    other replicas' addresses (smg's --mesh-peer-urls takes IP:port only) and execs smg."""
    if not meshed(role.replicas):
        return ["smg"], args
    launcher = ["router", "--mesh-service", mesh_service_name(model), "--mesh-port", str(MESH_PORT)]
    return ["kvant"], [*launcher, "--replicas", str(role.replicas), "--", *args]


def mesh_service_name(model: str) -> str:
    return f"{model}-{ROUTER}-mesh"


def router_objects(body: Obj, spec: QuantizedModelSpec, settings: OperatorSettings) -> list[Obj]:
    role = router_role(spec)
    if role is None:
        return []
    model, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    name = workload_name(model, role)
    pod_reader = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    return [
        *api_identity(_meta(body, name), [pod_reader]),
        _deployment(body, settings, role, router_args(model, namespace, spec), spec.serving.placement),
        disruption_budget(body, role),
        *([_mesh_service(body, role)] if meshed(role.replicas) else []),
    ]


def _meta(body: Obj, name: str) -> Obj:
    meta = object_meta(body, name, SERVING_COMPONENT)
    meta["labels"][KIND_LABEL] = RoleKind.ROUTER.value
    return meta


def _mesh_service(body: Obj, role: Role) -> Obj:
    """Headless: its DNS name resolves to every router pod, ready or not, for smg's mesh peers."""
    model = body["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(body, mesh_service_name(model)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": role.selector(model),
            "ports": [{"name": "mesh", "port": MESH_PORT, "targetPort": MESH_PORT}],
        },
    }


def _deployment(
    body: Obj, settings: OperatorSettings, role: Role, args: list[str], placed: PlacementSpec
) -> Obj:
    name = workload_name(body["metadata"]["name"], role)
    model = body["metadata"]["name"]
    # Ready means "can serve": smg's /readiness answers 503 while it has no healthy engine, so a router
    # with nothing registered (a fresh pod, every engine rolling, a node back from a reboot) leaves the
    # model's Service instead of answering 404 model_not_found from it; and the model is Ready only
    # once a router is (reconcile.serving_step). /health is liveness only: it always answers 200.
    readiness = {"httpGet": {"path": ROUTER_READINESS_PATH, "port": "http"}, "periodSeconds": 2}
    liveness = {
        "httpGet": {"path": ROUTER_LIVENESS_PATH, "port": "http"},
        "periodSeconds": 10,
        "failureThreshold": 6,
    }
    command, args = router_command(model, role, args)
    container: Obj = {
        "name": ROUTER,
        "image": settings.runtime_image,
        "command": command,
        "args": args,
        "ports": [
            {"name": "http", "containerPort": GATE_PORT},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT},
        ],
        "readinessProbe": readiness,
        "livenessProbe": liveness,
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
    }
    if meshed(role.replicas):
        container["ports"].append({"name": "mesh", "containerPort": MESH_PORT})
    # smg watches the engine pods through the API, with the token at the standard in-cluster path.
    container["volumeMounts"] = [api_access_mount(API_ACCESS)]
    pod = restricted(
        {
            "containers": [container],
            "serviceAccountName": name,
            "volumes": [api_access_volume(API_ACCESS)],
            "terminationGracePeriodSeconds": POD_TERMINATION_GRACE_SECONDS,
            **placement(placed, model, role),
        }
    )
    meta = _meta(body, name)
    meta["labels"].update(role.labels(model))
    return role_deployment(meta, role, model, pod, {"prometheus.io/scrape": "true"})
