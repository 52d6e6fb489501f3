"""`QuantizedModel.status`: what the operator observed and decided. Only the operator writes it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.rules import ApiModel
from kvant_operator.api.spec import QuantTargets, WeightFormat

PlanWarning = Annotated[str, Field(max_length=1024)]


class Phase(StrEnum):
    """Coarse lifecycle stage; conditions carry the detail."""

    PENDING = "Pending"
    FETCHING = "Fetching"
    CONVERTING = "Converting"
    CALIBRATING = "Calibrating"
    EVALUATING = "Evaluating"
    DEPLOYING = "Deploying"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    """Kubernetes condition status."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A kstatus-compatible condition."""

    type: str = Field(max_length=64, pattern=r"^[A-Z][A-Za-z]*$", description="Condition type.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=128, pattern=r"^[A-Za-z]([A-Za-z0-9]*)?$", description="CamelCase reason.")
    message: str = Field(default="", max_length=4096, description="What happened, for a person.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: int = Field(
        default=0, ge=0, description="metadata.generation the condition was set for."
    )


class SourceStatus(ApiModel):
    """A fetched source (hf://, s3://) pinned to the revision it resolved to."""

    uri: str = Field(max_length=1024, description="spec.source.uri, as fetched.")
    revision: str = Field(
        max_length=128, description="The resolved revision: the commit (hf://), a listing digest (s3://)."
    )
    location: str = Field(max_length=1024, description="Where the fetched files are (pvc://claim/path).")
    digest: str = Field(max_length=128, description="Content digest (sha256:...) of the fetched files.")
    bytes: int = Field(default=0, ge=0, description="Size of the fetched files.")
    files: int = Field(default=0, ge=0, description="Number of fetched files.")


class EngineStatus(ApiModel):
    """What the serving image holds, as its engine pods' `engine-check` found it."""

    image: str = Field(
        max_length=512, description="The serving image (spec.serving.image or the runtime image)."
    )
    sglang_version: str = Field(default="", max_length=64, description="The SGLang version in the image.")
    python: str = Field(default="", max_length=32, description="The image's Python version.")
    device: str = Field(default="cuda", max_length=8, description="cuda, or cpu (spec.serving.device).")
    attention_backend: str | None = Field(
        default=None,
        max_length=32,
        description="On cpu: the attention kernels the launcher chose for the node's CPU (intel_amx with "
        "Intel AMX, torch_native without).",
    )
    amx: bool | None = Field(default=None, description="On cpu: whether the node's CPU has Intel AMX.")


class ArtifactStatus(ApiModel):
    """The converted checkpoint being served."""

    uri: str = Field(max_length=1024, description="Where the artifact is.")
    digest: str = Field(
        default="", max_length=128, description="Content digest (sha256:...) of the artifact."
    )
    bytes: int = Field(default=0, ge=0, description="Artifact size.")
    source_bytes: int = Field(default=0, ge=0, description="Source checkpoint size.")


class CalibratedRun(ApiModel):
    """A run over calibration text, sized from the plan: its cost, and the device it gets."""

    # KV-scale calibration and GPTQ; planner/calibration_sizing.py and planner/gptq_sizing.py state the
    # estimates.

    device: str = Field(max_length=8, description="cpu, or cuda when the CPU estimate is over an hour.")
    gpus: int = Field(ge=0, description="GPUs the pod requests (0 on CPU).")
    flops: float = Field(ge=0, description="Estimated FLOPs of the run.")
    eta_seconds: int = Field(ge=0, description="Estimated run time on that device.")
    samples: int = Field(ge=0, description="Calibration sequences.")
    sequence_length: int = Field(ge=0, description="Tokens per sequence.")


class PlannedWeights(ApiModel):
    """The weights the plan sized, with every default applied (kvant_contracts.weights_recipe): the
    conversion Job builds exactly these."""

    format: WeightFormat = Field(description="Served weight format.")
    group_size: int | None = Field(default=None, description="INT4 group size in effect.")
    targets: QuantTargets | None = Field(
        default=None, description="Layers quantized, in effect (unset: nothing is converted)."
    )
    moe: bool = Field(default=False, description="The source has routed experts.")
    # What GPTQ would cost on these weights (planner/gptq_sizing.py), whatever the method: the method is
    # not among the plan's inputs, so switching to gptq needs no new plan. 0 in a plan an older
    # operator made.
    hessian_flops_per_token: float = Field(
        default=0, ge=0, description="GPTQ: FLOPs per calibration token to sum the Linears' Hessians."
    )
    solve_flops: float = Field(default=0, ge=0, description="GPTQ: FLOPs of every quantized Linear's solve.")
    hessian_bytes_per_layer: int = Field(
        default=0, ge=0, description="GPTQ: bytes of the float32 Hessians of the largest decoder layer."
    )


class PlanStatus(ApiModel):
    """The capacity plan, as `kvant plan --json` reports it (camelCase here, snake_case there)."""

    kv_cache_dtype: KvCacheDtype = Field(description="KV cache dtype the plan is for.")
    kv_bytes_per_token_per_gpu: int = Field(
        alias="kvBytesPerTokenPerGPU", ge=0, description="KV bytes/token/GPU."
    )
    weight_bytes_per_gpu: int = Field(alias="weightBytesPerGPU", ge=0, description="Weight bytes per GPU.")
    lora_pool_bytes_per_gpu: int | None = Field(
        default=None,
        alias="loraPoolBytesPerGPU",
        ge=0,
        description="Bytes per GPU the adapter pool (spec.serving.lora) takes out of the KV cache's "
        "budget, as SGLang allocates it. Unset: no pool.",
    )
    kv_tokens_per_replica: int = Field(
        ge=0, description="KV cache tokens per replica (SGLang's max total tokens)."
    )
    mem_fraction_static: float = Field(ge=0, le=1, description="--mem-fraction-static used.")
    page_size: int = Field(ge=1, description="KV page size in tokens.")
    max_concurrency: dict[str, int] = Field(
        default_factory=dict, description="Context length (tokens) → requests that fit at once per replica."
    )
    fits: bool = Field(
        True, description="False when the weights or one request at the longest context do not fit."
    )
    warnings: list[PlanWarning] = Field(
        default_factory=list, max_length=16, description="Why the plan may not fit."
    )
    refusal: PlanWarning | None = Field(
        default=None,
        description="Why no engine can start with this plan (no KV cache left beside the weights, or "
        "an adapter pool the planner cannot size); serving waits for an edit. Unset: engines can start.",
    )
    source_bytes: int = Field(default=0, ge=0, description="Size of the source checkpoint's tensors.")
    parameters: int = Field(default=0, ge=0, description="Parameters of the model.")
    active_parameters: int = Field(
        default=0, ge=0, description="Parameters one token passes through (MoE: the routed experts it uses)."
    )
    layers: int = Field(default=0, ge=0, description="Decoder layers.")
    architecture: str = Field(default="", max_length=128, description="config.json's architecture.")
    hidden_size: int = Field(default=0, ge=0, description="Hidden size.")
    calibration: CalibratedRun | None = Field(
        default=None, description="Where and how long KV-scale calibration runs (when it runs)."
    )
    gptq: CalibratedRun | None = Field(
        default=None, description="Where and how long the GPTQ conversion runs (spec.weights.method: gptq)."
    )
    inputs: str | None = Field(
        default=None, max_length=64, description="Digest of the spec fields the plan was made from."
    )
    weights: PlannedWeights | None = Field(
        default=None, description="The weights the plan sized, with every default applied."
    )


class ProtectionStatus(ApiModel):
    """What protection decided last."""

    effective_concurrency: int | None = Field(
        default=None, ge=0, description="Concurrency the gate enforces now."
    )
    token_usage: float | None = Field(
        default=None, ge=0, le=1, description="Last observed KV cache usage (0-1)."
    )
    retractions_per_minute: float | None = Field(
        default=None, ge=0, description="Last observed retraction rate."
    )
    last_decision: str | None = Field(
        default=None, max_length=1024, description="Last decision, for a person."
    )
    last_decision_time: datetime | None = Field(default=None, description="When it was taken.")


class AutoscalingStatus(ApiModel):
    """What the model's autoscaler (its HorizontalPodAutoscaler) reports."""

    min_replicas: int = Field(ge=0, description="spec.autoscaling.minReplicas in force.")
    max_replicas: int = Field(ge=0, description="spec.autoscaling.maxReplicas in force.")
    current_replicas: int = Field(default=0, ge=0, description="Replicas the autoscaler saw last.")
    desired_replicas: int = Field(default=0, ge=0, description="Replicas the autoscaler wants.")
    last_scale_time: datetime | None = Field(default=None, description="When it last changed replicas.")
    reason: str = Field(default="", max_length=128, description="Its most telling condition's reason.")
    message: str = Field(default="", max_length=1024, description="That condition's message.")


class QuantizedModelStatus(ApiModel):
    """Observed state of a QuantizedModel."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation last reconciled."
    )
    phase: Phase | None = Field(default=None, description="Lifecycle stage.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Fetched, Converted, Calibrated, KVScales, Validated, Ready, Serving, Progressing, "
        "Reconciling, Degraded, Stalled, CacheProtected.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(default=None, ge=0, description="Serving replicas that exist.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Serving replicas that are ready.")
    selector: str | None = Field(
        default=None,
        max_length=512,
        description="Label selector of the serving pods: the scale subresource's, for autoscalers.",
    )
    source: SourceStatus | None = Field(default=None, description="The fetched source (hf://, s3://).")
    engine: EngineStatus | None = Field(default=None, description="The SGLang the serving image holds.")
    artifact: ArtifactStatus | None = Field(default=None, description="The served artifact.")
    plan: PlanStatus | None = Field(default=None, description="The capacity plan.")
    protection: ProtectionStatus | None = Field(default=None, description="Protection state.")
    autoscaling: AutoscalingStatus | None = Field(
        default=None, description="The autoscaler's view (spec.autoscaling set)."
    )
