"""The Jobs the operator runs: the capacity plan, and the artifact (convert, then calibrate).

Each Job's last container prints its result as the last JSON line of its log; the operator reads
it through the pods/log API, so Job pods need no API access of their own.
"""

from __future__ import annotations

from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_contracts.lora import LoraEnvelope
from kvant_contracts.weights_recipe import int4_scheme
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import PlanStatus, SourceStatus
from kvant_operator.artifact_recipe import (
    artifact_location,
    needs_calibration,
    needs_conversion,
    needs_gptq,
    source_location,
)
from kvant_operator.hashing import digest
from kvant_operator.object_keys import ARTIFACT_LABEL, ATTEMPT_ANNOTATION, WORKERS_ANNOTATION
from kvant_operator.planner.capacity_plan import DEFAULT_CONTEXTS
from kvant_operator.render.artifact_containers import (
    calibrate_container,
    conversion_recipe,
    convert_container,
)
from kvant_operator.render.meta import object_meta, owner_reference
from kvant_operator.render.pod_security import restricted
from kvant_operator.settings import OperatorSettings

_JOB_NAME_MAX = 63


def _short(name: str, suffix: str) -> str:
    return f"{name[: _JOB_NAME_MAX - len(suffix) - 1]}-{suffix}"


def plan_inputs(spec: QuantizedModelSpec) -> Obj:
    """Everything `kvant plan` reads; a change here means a new plan Job."""
    serving, weights = spec.serving, spec.weights
    _, group_size = int4_scheme(weights.format.value, None, weights.group_size)
    common = {
        "source": spec.source.model_dump(mode="json"),
        "tp": serving.tensor_parallel,
        "kvDtype": spec.kv_cache.dtype.value,
        "weights": weights.format.value,
        "groupSize": group_size,
        "targets": weights.targets.value if weights.targets else None,
        "ignore": list(weights.ignore),
        "memFractionStatic": serving.mem_fraction_static,
        "pageSize": serving.page_size,
    }
    if serving.lora is not None:  # only when set: a model without a pool keeps its inputs and Job name
        common["lora"] = {**serving.lora.envelope().to_json(), "maxLoaded": None}  # it sizes nothing
    if (
        serving.cpu is not None
    ):  # CPU keys only on CPU: a GPU model's inputs (and plan Job name) stay as they were
        cpu = {
            "device": "cpu",
            "gpuMemoryGiB": serving.cpu.memory_gib,
            "kvCacheMiB": serving.cpu.kv_cache_mib,
        }
        return {**common, **cpu}
    assert serving.gpu is not None  # the device rule: cuda has a gpu block
    return {**common, "gpus": serving.gpu.count, "gpuMemoryGiB": serving.gpu.memory_gib}


def plan_job_name(model: str, spec: QuantizedModelSpec) -> str:
    return _short(model, f"plan-{digest(plan_inputs(spec), 8)}")


def plan_args(spec: QuantizedModelSpec, config_path: str) -> list[str]:
    inputs = plan_inputs(spec)
    args = [
        "plan",
        "--config",
        config_path,
        "--tp",
        str(inputs["tp"]),
        *(["--gpus", str(inputs["gpus"])] if "gpus" in inputs else ["--device", "cpu"]),
        "--gpu-memory-gib",
        str(inputs["gpuMemoryGiB"]),
        "--kv-dtype",
        inputs["kvDtype"],
        "--weights",
        inputs["weights"],
        "--page-size",
        str(inputs["pageSize"]),
        "--json",
    ]
    if inputs["groupSize"]:
        args += ["--group-size", str(inputs["groupSize"])]
    if inputs["targets"]:
        args += ["--targets", inputs["targets"]]
    if inputs.get("kvCacheMiB"):
        args += ["--kv-cache-mib", str(inputs["kvCacheMiB"])]
    if inputs["memFractionStatic"]:
        args += ["--mem-fraction-static", str(inputs["memFractionStatic"])]
    for pattern in inputs["ignore"]:
        args += ["--ignore", pattern]
    if "lora" in inputs:
        args += LoraEnvelope.from_json(inputs["lora"], "the plan inputs").pool_flags()
    for context in DEFAULT_CONTEXTS:
        args += ["--context", str(context)]
    return args


def plan_job(
    body: Obj, spec: QuantizedModelSpec, settings: OperatorSettings, fetched: SourceStatus | None = None
) -> Obj:
    source = source_location(spec, fetched)
    container = {
        "name": "plan",
        "image": settings.operator_image,
        "command": ["kvant"],
        "args": plan_args(spec, source.path),
        "volumeMounts": [{"name": "source", "mountPath": source.mount_path, "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    return job_object(
        object_meta(body, plan_job_name(body["metadata"]["name"], spec), "plan"),
        [container],
        [source.volume],
        backoff_limit=0,
    )


def artifact_job_name(key: str, attempt: int) -> str:
    return f"kvant-artifact-{key}-{attempt}"


def shards_job_name(key: str, attempt: int) -> str:
    return f"kvant-artifact-{key}-{attempt}-shards"


def conversion_workers(
    body: Obj, spec: QuantizedModelSpec, source_bytes: int, settings: OperatorSettings
) -> int:
    """One worker per `conversion_bytes_per_worker` of source, unless the model's annotation says;
    one for GPTQ, which goes through the decoder layers in order (each layer's inputs are the
    previous quantized layer's outputs)."""
    if needs_gptq(spec):
        return 1
    override = (body["metadata"].get("annotations") or {}).get(WORKERS_ANNOTATION)
    per_worker = settings.conversion_bytes_per_worker
    wanted = int(override) if override and override.isdigit() else -(-source_bytes // per_worker)
    return max(1, min(settings.max_conversion_workers, wanted))


def shards_job(
    bodies: list[Obj],
    spec: QuantizedModelSpec,
    settings: OperatorSettings,
    key: str,
    *,
    workers: int,
    attempt: int,
    plan: PlanStatus,
    fetched: SourceStatus | None = None,
) -> Obj:
    """An Indexed Job: pod i converts the shards i, i+N, i+2N, ... into the shared staging area."""
    source = source_location(spec, fetched)
    output = artifact_location(spec, settings, key)
    worker = ["--worker-index", "$(JOB_COMPLETION_INDEX)", "--workers", str(workers)]
    convert = convert_container(
        conversion_recipe(spec, plan), spec, settings, source.path, output.path, mode=worker, sizing=plan.gptq
    )
    convert["volumeMounts"] = _artifact_mounts(source.mount_path, output.mount_path)
    job = job_object(
        _shared_meta(bodies, shards_job_name(key, attempt), key, attempt),
        [convert],
        [source.volume, output.volume],
        backoff_limit=2 * workers,
    )
    job["spec"].update({"completionMode": "Indexed", "completions": workers, "parallelism": workers})
    return job


def _shared_meta(bodies: list[Obj], name: str, key: str, attempt: int) -> Obj:
    meta = object_meta(bodies[0], name, "artifact")
    meta["labels"][ARTIFACT_LABEL] = key
    meta["ownerReferences"] = [
        owner_reference(b, controller=False) for b in bodies if b["metadata"].get("uid")
    ]
    meta["annotations"] = {ATTEMPT_ANNOTATION: str(attempt)}
    return meta


def _artifact_mounts(source_mount: str, output_mount: str) -> list[Obj]:
    return [
        {"name": "source", "mountPath": source_mount, "readOnly": True},
        {"name": "artifacts", "mountPath": output_mount},
    ]


def artifact_job(
    bodies: list[Obj],
    spec: QuantizedModelSpec,
    settings: OperatorSettings,
    key: str,
    *,
    attempt: int,
    plan: PlanStatus,
    workers: int = 1,
    fetched: SourceStatus | None = None,
) -> Obj:
    """One Job per artifact key, owned by every QuantizedModel that uses it, building what `plan`
    sized. After a distributed conversion (workers > 1) its convert step only finalizes what the
    shards Job wrote."""
    source = source_location(spec, fetched)
    output = artifact_location(spec, settings, key)
    steps = []
    if needs_conversion(spec):
        finalize = ["--finalize"] if workers > 1 else []
        recipe = conversion_recipe(spec, plan)
        convert = convert_container(
            recipe, spec, settings, source.path, output.path, mode=finalize, sizing=plan.gptq
        )
        steps.append(convert)
    if needs_calibration(spec):
        steps.append(calibrate_container(spec, settings, source.path, output.path, plan.calibration))
    for step in steps:
        step["volumeMounts"] = _artifact_mounts(source.mount_path, output.mount_path)
    meta = _shared_meta(bodies, artifact_job_name(key, attempt), key, attempt)
    # The steps run in order: every step but the last is an init container.
    return job_object(meta, steps[-1:], [source.volume, output.volume], backoff_limit=2, init=steps[:-1])


def eval_job_name(key: str, spec: QuantizedModelSpec) -> str:
    evaluation = spec.evaluation.model_dump(mode="json", by_alias=True) if spec.evaluation else {}
    return f"kvant-eval-{key}-{digest(evaluation, 6)}"


def eval_job(
    body: Obj,
    spec: QuantizedModelSpec,
    settings: OperatorSettings,
    key: str,
    fetched: SourceStatus | None = None,
) -> Obj:
    """Compares the artifact with its source on held-out text; exit 1 means the gate failed."""
    assert spec.evaluation is not None
    source = source_location(spec, fetched)
    output = artifact_location(spec, settings, key)
    args = ["eval", source.path, output.path, "--max-kl-divergence", str(spec.evaluation.max_kl_divergence)]
    if spec.kv_cache.dtype.is_fp8:
        args += ["--kv-dtype", spec.kv_cache.dtype.value]  # simulated FP8 storage, with the artifact's scales
        if spec.kv_cache.scales is not None and spec.kv_cache.scales.value == "unit":
            args.append("--unit-scales")
    container = {
        "name": "eval",
        "image": settings.runtime_image,
        "command": ["kvant"],
        "args": args,
        "volumeMounts": [
            {"name": "source", "mountPath": source.mount_path, "readOnly": True},
            {"name": "artifacts", "mountPath": output.mount_path, "readOnly": True},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
    meta = object_meta(body, eval_job_name(key, spec), "evaluation")
    meta["labels"][ARTIFACT_LABEL] = key
    return job_object(meta, [container], [source.volume, output.volume], backoff_limit=0)


def job_object(
    meta: Obj, containers: list[Obj], volumes: list[Obj], *, backoff_limit: int, init: list[Obj] | None = None
) -> Obj:
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": containers, "volumes": volumes}
    if init:
        pod_spec["initContainers"] = init
    pod_spec = restricted(pod_spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod_spec},
        },
    }
