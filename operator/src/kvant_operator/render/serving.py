"""The serving workload: per role a Deployment whose pods run the engine with the gate in front.

Engine settings (image, KV dtype, TP, engine args, the plan) live in the pod template, so changing
them rolls the pods. Limits live in their own ConfigMap, which the gate watches through the API
(render/gate_access.py; the mounted file is its fallback), so changing them touches no pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvant_contracts.drain import (
    DRAIN_CEILING_SECONDS,
    GATE_CLOSE_SECONDS,
    POD_TERMINATION_GRACE_SECONDS,
    drain_wait_script,
)
from kvant_contracts.engine_scheduler import engine_env, engine_flags
from kvant_contracts.kube_object import Obj
from kvant_contracts.launch_spec import Device, LaunchSpec
from kvant_contracts.serving_pod import (
    BOOTSTRAP_PORT,
    ENGINE_HEALTH_PATH,
    ENGINE_HOST,
    ENGINE_PORT,
    ENGINE_PROBE_TIMEOUT_SECONDS,
    GATE_METRICS_PATH,
    GATE_PORT,
    GATE_READINESS_PATH,
    METRICS_PORT,
)
from kvant_operator.api.spec import Engine, QuantizedModelSpec
from kvant_operator.api.status import PlanStatus
from kvant_operator.hashing import digest
from kvant_operator.object_keys import CONFIG_HASH, SERVING_COMPONENT
from kvant_operator.render.access_secrets import with_access
from kvant_operator.render.autoscaler import HPA, autoscaler
from kvant_operator.render.engine_launcher import IMAGE_PYTHON, engine_command, init_containers
from kvant_operator.render.engine_launcher import VOLUME as LAUNCHER_VOLUME
from kvant_operator.render.engine_priority import priority_flags
from kvant_operator.render.gate_access import gate_identity, with_gate_api_access
from kvant_operator.render.limits_configmap import LIMITS_FILE, limits_configmap, limits_name
from kvant_operator.render.meta import object_meta
from kvant_operator.render.network_policy import network_policies
from kvant_operator.render.pod_placement import placement
from kvant_operator.render.pod_security import restricted
from kvant_operator.render.roles import Role, disruption_budget, role_deployment, roles, workload_name
from kvant_operator.render.router import router_objects, router_role
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location

# The engine listens on the pod's loopback: the gate is the only way in. The gate's metrics port is the
# pod's read-only window onto the engine (merged /metrics, /engine/health), see kvant_runtime.gate.
METRICS_PORT_NAME = "metrics"  # the chart's PodMonitor scrapes this port by name
LIMITS_DIR = "/etc/kvant/limits"
# Where smg's service discovery reads a prefill pod's bootstrap port (its --bootstrap-port-annotation
# default); the router injects the pod IP and this port into each request it sends to the pair.
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"
# Every kind serving_objects renders, as (apiVersion, kind, plural): the operator watches them
# (kube_cache) and deletes what a spec change leaves behind (reconcile.serving_step.prune).
SERVING_KINDS = (
    ("v1", "ConfigMap", "configmaps"),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("rbac.authorization.k8s.io/v1", "Role", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    ("apps/v1", "Deployment", "deployments"),
    ("v1", "Service", "services"),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    HPA,
)
# Large models load for many minutes; the startup probe waits up to 60 min before liveness applies.
_STARTUP_PERIOD_S, _STARTUP_FAILURES = 10, 360


@dataclass(frozen=True)
class ServingInputs:
    """What every serving renderer reads: the model, its plan, and the weights it serves."""

    body: Obj
    spec: QuantizedModelSpec
    plan: PlanStatus
    model_dir: Location
    digest: str
    settings: OperatorSettings

    @property
    def model(self) -> str:
        return str(self.body["metadata"]["name"])


def serving_objects(inputs: ServingInputs, effective_concurrency: int | None) -> list[Obj]:
    """Everything that serves a model, for the operator and `kvant render` alike: the live limits
    ConfigMap, then per role its Deployment, Service and PodDisruptionBudget."""
    router = router_role(inputs.spec)
    objects = [
        limits_configmap(inputs.body, inputs.spec, effective_concurrency),
        *network_policies(inputs.body, inputs.settings, router),
        *gate_identity(inputs.body),  # before the Deployments: their pods run as its account
    ]
    for role in roles(inputs.spec):
        objects.append(deployment(inputs, role))
        if router is None:  # with a router, smg finds the engine pods itself: they need no Service
            objects.append(service(inputs.body, role))
        objects.append(disruption_budget(inputs.body, role))
    if router is not None:
        objects += router_objects(inputs.body, inputs.spec, inputs.settings)
        objects.append(service(inputs.body, router, name=inputs.model))  # the model's one door
    if inputs.spec.autoscaling is not None:
        objects.append(autoscaler(inputs.body, inputs.spec.autoscaling))
    return objects


def deployment(inputs: ServingInputs, role: Role) -> Obj:
    body, model = inputs.body, inputs.model
    meta = object_meta(body, workload_name(model, role), SERVING_COMPONENT)
    meta["labels"].update(role.labels(model))
    pod: Obj = {
        "containers": [_engine_container(inputs, role), _gate_container(inputs, role)],
        "volumes": [
            {"name": "limits", "configMap": {"name": limits_name(model)}},
            {**inputs.model_dir.volume, "name": "model"},
        ],
        # The gate drains for DRAIN_CEILING_SECONDS at most, then the engine stops (kvant_contracts.drain).
        "terminationGracePeriodSeconds": POD_TERMINATION_GRACE_SECONDS,
        **placement(inputs.spec.serving.placement, model, role),
    }
    if inputs.spec.serving.engine is Engine.SGLANG:
        pod["initContainers"] = init_containers(inputs.settings.runtime_image, pod["containers"][0])
        pod["volumes"].append(LAUNCHER_VOLUME)
    pod = with_gate_api_access(with_access(pod, inputs.spec.access, inputs.spec.serving.engine), body)
    pod_spec = restricted(pod)
    engine = pod_spec["containers"][0]
    annotations = {
        CONFIG_HASH: digest({"engine": engine, "digest": inputs.digest}),
        "prometheus.io/scrape": "true",
    }
    if role.disaggregation == "prefill":
        annotations[BOOTSTRAP_PORT_ANNOTATION] = str(BOOTSTRAP_PORT)
    return role_deployment(meta, role, model, pod_spec, annotations)


def _engine_container(inputs: ServingInputs, role: Role) -> Obj:
    spec, settings, model_dir = inputs.spec, inputs.settings, inputs.model_dir
    mount = {"name": "model", "mountPath": model_dir.mount_path, "readOnly": True}
    container: Obj = {
        "name": "engine",
        "image": settings.runtime_image,
        "command": ["kvant"],
        "volumeMounts": [mount],
        "startupProbe": _health_probe(periodSeconds=_STARTUP_PERIOD_S, failureThreshold=_STARTUP_FAILURES),
        "readinessProbe": _health_probe(periodSeconds=5),
        "livenessProbe": _health_probe(periodSeconds=15, failureThreshold=4),
        "lifecycle": {"preStop": {"exec": {"command": _wait_for_gate_drain()}}},
    }
    if spec.serving.engine is Engine.SIMULATOR:
        container["args"] = _simulator_args(inputs, role)
        env = engine_env(spec.serving.scheduler.values())
        if env:
            container["env"] = [{"name": name, "value": value} for name, value in env.items()]
        return container
    # The user's SGLang image, with the launcher from an emptyDir (render/engine_launcher.py).
    container["image"] = spec.serving.image or settings.runtime_image
    engine_command(container, _launch_spec(inputs, role).to_json())
    container["resources"] = _engine_resources(spec)
    return container


def _wait_for_gate_drain() -> list[str]:
    """The engine's preStop hook: hold the engine's SIGTERM until the gate has drained and gone, so a
    request the gate still serves keeps its engine. An exec, since the kubelet runs a container's
    preStop before signalling it and signals the gate at the same time: only the engine has to wait.
    In Python with its standard library alone: the engine's image (SGLang's, or the runtime's) has
    python3, not Kvant's environment, nor curl."""
    script = drain_wait_script(GATE_PORT, DRAIN_CEILING_SECONDS + GATE_CLOSE_SECONDS)
    return [IMAGE_PYTHON, "-c", script]


def _engine_resources(spec: QuantizedModelSpec) -> Obj:
    """GPUs on cuda; on cpu the cores and the memory the planner sized the KV cache from (the memory
    is the limit too, so the node never gives the engine less than its plan)."""
    if spec.serving.cpu is not None:
        cpu = spec.serving.cpu
        memory = f"{round(cpu.memory_gib * 1024)}Mi"
        return {"requests": {"cpu": str(cpu.cores), "memory": memory}, "limits": {"memory": memory}}
    assert spec.serving.gpu is not None  # the device rule: cuda has a gpu block
    gpus = str(spec.serving.gpu.count)
    return {"limits": {spec.serving.gpu.resource: gpus}, "requests": {spec.serving.gpu.resource: gpus}}


def _health_probe(**timing: int) -> Obj:
    """The engine's /health, through the gate's metrics port (the engine itself is on loopback), with
    the time SGLang's health check takes (serving_pod.ENGINE_PROBE_TIMEOUT_SECONDS)."""
    get = {"path": ENGINE_HEALTH_PATH, "port": METRICS_PORT}
    return {"httpGet": get, "timeoutSeconds": ENGINE_PROBE_TIMEOUT_SECONDS, **timing}


def _simulator_args(inputs: ServingInputs, role: Role) -> list[str]:
    plan = inputs.plan
    return [
        "sim", "--host", ENGINE_HOST, "--port", str(ENGINE_PORT), "--model-name", inputs.model,
        "--kv-tokens", str(plan.kv_tokens_per_replica), "--kv-cache-dtype", role.kv_cache_dtype.value,
        "--page-size", str(plan.page_size), "--kv-bytes-per-token", str(plan.kv_bytes_per_token_per_gpu),
        "--max-running-requests", str(_max_running_requests(inputs.plan)),
        "--seed", "0",
        "--tokenizer", inputs.model_dir.path,
        *_simulator_disaggregation(role),
        # The simulator takes SGLang's own flag and environment variables for these (kvant sim --help).
        *engine_flags(inputs.spec.serving.scheduler.values()),
        *(inputs.spec.serving.lora.envelope().flags() if inputs.spec.serving.lora is not None else []),
    ]  # fmt: skip


def _simulator_disaggregation(role: Role) -> list[str]:
    if role.disaggregation is None:
        return []
    args = ["--disaggregation-mode", role.disaggregation]
    if role.disaggregation == "prefill":
        args += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    return args


def _max_running_requests(plan: PlanStatus) -> int:
    """The engine's outer bound, set once from the plan: room for requests averaging 256 KV tokens.

    It never follows spec.limits: changing an engine flag restarts the engine, and on-call limits must
    not. It is deliberately loose (the engine admits by prompt, as SGLang does); the gate enforces the
    live, token-aware limits below it.
    """
    return max(1, min(4096, plan.kv_tokens_per_replica // 256))


def _launch_spec(inputs: ServingInputs, role: Role) -> LaunchSpec:
    spec, plan = inputs.spec, inputs.plan
    return LaunchSpec(
        modelPath=inputs.model_dir.path,
        servedModelName=inputs.model,
        weightsFormat=spec.weights.format.value,
        kvCacheDtype=role.kv_cache_dtype.value,
        tensorParallel=spec.serving.tensor_parallel,
        artifactDigest=inputs.digest or None,
        # On CPU the KV size is --max-total-tokens alone (SGLang's fraction would apply to the host's RAM).
        memFractionStatic=plan.mem_fraction_static if spec.serving.device is Device.CUDA else None,
        maxRunningRequests=_max_running_requests(plan),
        maxTotalTokens=plan.kv_tokens_per_replica,
        pageSize=spec.serving.page_size,
        disaggregationRole=role.disaggregation,
        device=spec.serving.device.value,
        host=ENGINE_HOST,
        port=ENGINE_PORT,
        engineArgs=(*priority_flags(spec.serving.priority_scheduling, role.engine_args), *role.engine_args),
        scheduler=spec.serving.scheduler.values(),
        lora=spec.serving.lora.envelope() if spec.serving.lora is not None else None,
    )


# SGLang's flag (a store_true) that lets the engine run a repository's own code; the gate follows it.
TRUST_REMOTE_CODE = "--trust-remote-code"


def _gate_container(inputs: ServingInputs, role: Role) -> Obj:
    container: Obj = {
        "name": "gate",
        "image": inputs.settings.runtime_image,
        "command": ["kvant"],
        "args": [
            "gate",
            "--listen",
            f"0.0.0.0:{GATE_PORT}",
            "--upstream",
            f"http://{ENGINE_HOST}:{ENGINE_PORT}",
            "--limits",
            f"{LIMITS_DIR}/{LIMITS_FILE}",
            "--metrics-listen",
            f"0.0.0.0:{METRICS_PORT}",
            # Admission is bounded by the plan until the engine reports its own capacity.
            "--planned-kv-tokens",
            str(inputs.plan.kv_tokens_per_replica),
            # Prompts are counted with the model's own tokenizer, as the engine counts them, and loaded
            # as the engine loads it: with the repository's own code only where the engine runs it.
            "--tokenizer",
            inputs.model_dir.path,
            *([TRUST_REMOTE_CODE] if TRUST_REMOTE_CODE in role.engine_args else []),
            # On SIGTERM it drains for this long at most; the live limits may end it sooner.
            "--drain-seconds",
            str(DRAIN_CEILING_SECONDS),
        ],
        "ports": [
            {"name": "http", "containerPort": GATE_PORT},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT},
        ],
        "volumeMounts": [
            {"name": "limits", "mountPath": LIMITS_DIR, "readOnly": True},
            {"name": "model", "mountPath": inputs.model_dir.mount_path, "readOnly": True},
        ],
        # The engine's /health through the gate's own port: ready when a request would be served, and
        # not ready while the gate drains.
        "readinessProbe": {
            "httpGet": {"path": GATE_READINESS_PATH, "port": "http"},
            "periodSeconds": 2,
            "timeoutSeconds": ENGINE_PROBE_TIMEOUT_SECONDS,
        },
        # The gate's own page, not the engine's health: a slow engine must not restart the gate.
        "livenessProbe": {
            "httpGet": {"path": GATE_METRICS_PATH, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        # maxQueuedBytes (256 MiB by default) bounds the bodies it buffers; the rest is small.
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
    }
    if role.disaggregation == "prefill":
        # SGLang binds the bootstrap server to its loopback host; decode pods reach it on the pod IP.
        container["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        container["args"] += ["--relay", f"$(POD_IP):{BOOTSTRAP_PORT}"]
        container["ports"].append({"name": "bootstrap", "containerPort": BOOTSTRAP_PORT})
    return container


def service(body: Obj, role: Role, name: str | None = None) -> Obj:
    model = body["metadata"]["name"]
    meta = object_meta(body, name or workload_name(model, role), SERVING_COMPONENT)
    meta["labels"].update(role.labels(model))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "selector": role.selector(model),
            "ports": [
                # No engine port: the engine listens on the pod's loopback, behind the gate.
                {"name": "http", "port": 80, "targetPort": "http"},
                {"name": METRICS_PORT_NAME, "port": METRICS_PORT, "targetPort": METRICS_PORT_NAME},
            ],
        },
    }
