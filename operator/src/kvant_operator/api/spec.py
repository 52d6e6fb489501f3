"""`QuantizedModel.spec` (kvant.dev/v1alpha1): what to quantize, how to serve it, and the on-call limits.

Field docstrings become the CRD's descriptions and the generated reference in docs/crd-reference.md.
The KV scale source's default depends on another field; it is filled after the rules have run, so a
rule sees what the user wrote. The weights' defaults depend on the source too (targets: experts for an
MoE model), so they are never filled here: `WeightsSpec.recipe` (kvant_contracts.weights_recipe)
decides them, for the planner, the Jobs and the artifact key alike.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from kvant_contracts import engine_scheduler
from kvant_contracts.autoscaling import (
    DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
    DEFAULT_SCALE_UP_STABILIZATION_SECONDS,
    DEFAULT_TARGET_DEMAND,
)
from kvant_contracts.cpu_serving import CPU_E5M2_REASON
from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE, FP8_KV_DTYPE_NAMES, KvCacheDtype
from kvant_contracts.launch_spec import Device
from kvant_contracts.limits import AdmissionMode, Limits, Oversize, ProtectionMode
from kvant_contracts.lora import DEFAULT_SLOTS, DEFAULT_TARGETS, LoraEnvelope, LoraTarget
from kvant_contracts.retraction_rate import RETRACTION_WINDOW_SECONDS
from kvant_contracts.sglang_metrics import TOKEN_USAGE
from kvant_contracts.tenancy import DEFAULT_TENANT, OTHER_TENANTS, PRIORITIES, TENANT_NAME, Tenancy
from kvant_contracts.weights_recipe import (
    DEFAULT_GROUP_SIZE,
    DEFAULT_INT4_METHOD,
    DENSE_DEFAULT_TARGETS,
    GPTQ_ACT_ORDER,
    GPTQ_DAMPENING,
    GPTQ_SAMPLES,
    GPTQ_SEQUENCE_LENGTH,
    MOE_DEFAULT_TARGETS,
    WeightsRecipe,
    effective_weights,
)
from kvant_operator.api.placement import PlacementSpec
from kvant_operator.api.rules import ApiModel, Rule, TransitionRule
from kvant_operator.sources import SOURCE_FORMS, SOURCE_URI

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Engine flags Kvant derives from the spec; setting them in engineArgs would silently fight the spec.
OWNED_ENGINE_FLAGS = (
    "kv-cache-dtype|tp|tp-size|tensor-parallel-size|mem-fraction-static|page-size|"
    "max-running-requests|max-queued-requests|model-path|host|port|disaggregation-mode|disaggregation-bootstrap-port|"
    "admin-api-key|api-key|device|enable-lora|max-lora-rank|lora-target-modules|max-loras-per-batch|"
    "max-loaded-loras|lora-paths"
)
OWNED_FLAG_PATTERN = rf"^--({OWNED_ENGINE_FLAGS})(=.*)?$"
MAX_ENGINE_ARGS = 64
# Bounded lengths keep the CEL rules over these lists inside the API server's cost budget.
EngineArg = Annotated[str, Field(max_length=256)]
ModuleName = Annotated[str, Field(min_length=1, max_length=256)]
# A glob over a source's file paths (fnmatch): no path separators leading, no '..'.
FilePattern = Annotated[
    str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9*?._\[\]-][A-Za-z0-9*?._/\[\]-]*$")
]


# The FP8 KV dtypes as a CEL list literal, for the rules that allow scales only there.
_FP8_CEL_LIST = "[" + ", ".join(f"'{name}'" for name in FP8_KV_DTYPE_NAMES) + "]"


class WeightFormat(StrEnum):
    """Format of the served weights. int4 is compressed-tensors pack-quantized W4A16."""

    BF16 = "bf16"
    FP8 = "fp8"
    INT4 = "int4"


class QuantMethod(StrEnum):
    """How INT4 weights are rounded: rtn (round to nearest) or gptq (error-compensating, calibrated on
    text: spec.weights.gptq)."""

    RTN = "rtn"
    GPTQ = "gptq"


class QuantTargets(StrEnum):
    """Which Linear layers are quantized: every Linear of the decoder layers, or only MoE routed experts."""

    ALL_LINEAR = "all-linear"
    EXPERTS = "experts"


class KvScales(StrEnum):
    """Where FP8 KV scales come from. unit means scale 1.0 (values beyond ±448 saturate): never a default."""

    CALIBRATE = "calibrate"
    CHECKPOINT = "checkpoint"
    UNIT = "unit"


class Engine(StrEnum):
    """The serving engine: SGLang on GPUs, or Kvant's simulator (same API and metrics, no GPU)."""

    SGLANG = "sglang"
    SIMULATOR = "simulator"


class DisaggregationMode(StrEnum):
    """none: each replica prefills and decodes. prefill-decode: separate prefill and decode roles."""

    NONE = "none"
    PREFILL_DECODE = "prefill-decode"


class S3SourceSpec(ApiModel):
    """Where an s3:// source is served, when not by the operator's default endpoint."""

    endpoint: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._/-]*)?$",
        description="S3 endpoint URL. Unset: the operator's default (the chart's sources.s3.endpoint), "
        "else AWS.",
    )
    region: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="S3 region. Unset: the operator's default.",
    )


class SourceSpec(ApiModel):
    """The checkpoint to serve. Immutable: a different model is a different QuantizedModel."""

    transition_rules = (
        TransitionRule(
            cel="self == oldSelf",
            message="spec.source is immutable: create a new QuantizedModel to serve a different "
            "checkpoint or revision",
            holds=lambda old, new: old == new,
        ),
    )
    rules = (
        Rule(
            cel=f"self.uri.matches('{SOURCE_URI}')",
            message=f"spec.source.uri must be {SOURCE_FORMS}",
            field_path=".uri",
            holds=lambda s: re.search(SOURCE_URI, s.uri) is not None,
        ),
        Rule(
            cel="!has(self.s3) || self.uri.startsWith('s3://')",
            message="spec.source.s3 applies to s3:// sources only",
            field_path=".s3",
            holds=lambda s: s.s3 is None or s.uri.startswith("s3://"),
        ),
        Rule(
            cel="!has(self.revision) || !self.uri.startsWith('s3://')",
            message="spec.source.revision does not apply to s3:// sources: the fetched listing is the "
            "revision",
            field_path=".revision",
            holds=lambda s: s.revision is None or not s.uri.startswith("s3://"),
        ),
        Rule(
            cel="!has(self.allowPatterns) || size(self.allowPatterns) == 0 || self.uri.startsWith('hf://') || self.uri.startsWith('s3://')",
            message="spec.source.allowPatterns applies to fetched sources (hf://, s3://) only",
            field_path=".allowPatterns",
            holds=lambda s: not s.allow_patterns or s.uri.startswith(("hf://", "s3://")),
        ),
    )

    uri: str = Field(min_length=1, max_length=1024, description="Where the checkpoint is.")
    revision: str | None = Field(
        default=None,
        max_length=128,
        pattern=r"^[A-Za-z0-9._/-]+$",
        description="Commit, tag or branch of the source (hf://: resolved to its commit when fetched, "
        "and recorded in status.source); part of the artifact cache key.",
    )
    credentials_secret: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Secret in the same namespace with the credentials to read the source (HF_TOKEN, "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); only the fetch pod sees it. Unset: the operator's "
        "default (the chart's sources.defaultCredentialsSecret), if any.",
    )
    s3: S3SourceSpec | None = Field(default=None, description="S3 endpoint and region of an s3:// source.")
    allow_patterns: list[FilePattern] | None = Field(
        default=None,
        max_length=32,
        description="Globs of the files to fetch (hf://, s3://). Empty: what serving needs (weights, index, "
        "configs, tokenizer, chat template, model code).",
    )


class OutputSpec(ApiModel):
    """Where converted artifacts are written; each is content-addressed below `path`."""

    pvc: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="PersistentVolumeClaim name.")
    path: str = Field(default="", max_length=512, description="Prefix inside the claim.")


def _dataset_rule(field: str) -> Rule:
    """A calibration text: builtin, or a relative path that stays inside the source."""
    return Rule(
        cel="self.dataset == 'builtin' || (!self.dataset.startsWith('/') && "
        "!self.dataset.matches('(^|/)[.][.](/|$)'))",
        message=f"{field} must be builtin or a relative path inside the source (no leading '/', no '..')",
        field_path=".dataset",
        holds=lambda m: (
            m.dataset == "builtin" or (not m.dataset.startswith("/") and ".." not in m.dataset.split("/"))
        ),
    )


class GptqSpec(ApiModel):
    """GPTQ's calibration (spec.weights.method: gptq): the text whose activations give each Linear's
    Hessian, and the solver's settings. The conversion runs one decoder layer at a time and resumes at
    the layer it reached."""

    rules = (_dataset_rule("spec.weights.gptq.dataset"),)

    samples: int = Field(default=GPTQ_SAMPLES, ge=1, le=4096, description="Calibration sequences.")
    sequence_length: int = Field(
        default=GPTQ_SEQUENCE_LENGTH, ge=16, le=131072, description="Tokens per calibration sequence."
    )
    dampening: float = Field(
        default=GPTQ_DAMPENING,
        gt=0,
        le=1,
        description="Added to the Hessian's diagonal, as a fraction of its mean.",
    )
    act_order: bool = Field(
        default=GPTQ_ACT_ORDER,
        description="Quantize columns by decreasing activation energy (groups keep their columns).",
    )
    dataset: str = Field(
        default="builtin",
        max_length=256,
        description="\"builtin\" (Kvant's prose, then the Python standard library's docstrings, to the "
        "tokens asked for) or a path inside the source (a UTF-8 file or a folder of *.txt).",
    )


class WeightsSpec(ApiModel):
    """How the weights are served and, when they are converted, how."""

    rules = (
        Rule(
            cel="self.format == 'int4' || !has(self.method)",
            message="spec.weights.method applies only to format: int4; remove it or set "
            "spec.weights.format: int4",
            field_path=".method",
            holds=lambda w: w.format is WeightFormat.INT4 or w.method is None,
        ),
        Rule(
            cel="!has(self.gptq) || (has(self.method) && self.method == 'gptq')",
            message="spec.weights.gptq applies only to spec.weights.method: gptq; remove it, or set the "
            "method",
            field_path=".gptq",
            holds=lambda w: w.gptq is None or w.method is QuantMethod.GPTQ,
        ),
        Rule(
            cel="self.format == 'int4' || !has(self.groupSize)",
            message="spec.weights.groupSize applies only to format: int4; remove it or set "
            "spec.weights.format: int4",
            field_path=".groupSize",
            holds=lambda w: w.format is WeightFormat.INT4 or w.group_size is None,
        ),
    )

    format: WeightFormat = WeightFormat.INT4
    method: QuantMethod | None = Field(default=None, description=f"Default for int4: {DEFAULT_INT4_METHOD}.")
    group_size: Literal[32, 64, 128] | None = Field(
        default=None,
        description=f"INT4 quantization group size along the input dimension. Default for int4: "
        f"{DEFAULT_GROUP_SIZE}.",
    )
    targets: QuantTargets | None = Field(
        default=None,
        description=f"Layers to quantize. Unset: {MOE_DEFAULT_TARGETS} for MoE models, "
        f"{DENSE_DEFAULT_TARGETS} for dense models (status.plan.weights shows which). "
        "Embeddings, lm_head, norms and router gates always stay in higher precision.",
    )
    gptq: GptqSpec | None = Field(
        default=None, description="GPTQ's calibration (method gptq only). Unset: the defaults shown."
    )
    ignore: list[ModuleName] = Field(
        default_factory=list,
        max_length=64,
        description='Extra modules kept in higher precision: exact names or "re:<regex>" (compressed-tensors '
        "ignore syntax).",
    )
    output: OutputSpec | None = Field(
        default=None, description="Artifact location. Unset: the operator's cache."
    )

    def recipe(self, *, converts: bool, moe: bool) -> WeightsRecipe:
        """The conversion in effect (kvant_contracts.weights_recipe decides every default)."""
        return effective_weights(
            self.format.value,
            method=self.method.value if self.method else None,
            group_size=self.group_size,
            targets=self.targets.value if self.targets else None,
            converts=converts,
            moe=moe,
        )


class CalibrationSpec(ApiModel):
    """The calibration run that measures per-layer FP8 KV scales."""

    rules = (_dataset_rule("spec.kvCache.calibration.dataset"),)

    samples: int = Field(
        default=512,
        ge=1,
        le=4096,
        description="Calibration sequences, at most (the default is llm-compressor's KV-cache recipe). "
        "The builtin text is a few KB of prose, about one 2,048-token sequence: enough for an absmax, "
        "while a dataset gives as many as asked.",
    )
    sequence_length: int = Field(
        default=2048, ge=16, le=131072, description="Tokens per calibration sequence."
    )
    dataset: str = Field(
        default="builtin",
        max_length=256,
        description='"builtin" (bundled prose) or a path inside the source (a UTF-8 file or a folder '
        "of *.txt).",
    )


class KvCacheSpec(ApiModel):
    """The KV cache element type and, for FP8, where its scales come from."""

    rules = (
        Rule(
            cel=f"!has(self.scales) || self.dtype in {_FP8_CEL_LIST}",
            message="spec.kvCache.scales applies only to an FP8 KV cache: set spec.kvCache.dtype to "
            f"{' or '.join(FP8_KV_DTYPE_NAMES)}, or remove scales",
            field_path=".scales",
            holds=lambda kv: kv.scales is None or kv.dtype.is_fp8,
        ),
        Rule(
            cel=f"!has(self.calibration) || (self.dtype in {_FP8_CEL_LIST} && "
            "(!has(self.scales) || self.scales == 'calibrate'))",
            message="spec.kvCache.calibration is used only with calibrated FP8 scales: remove it, or use "
            "an FP8 dtype with spec.kvCache.scales: calibrate",
            field_path=".calibration",
            holds=lambda kv: (
                kv.calibration is None or (kv.dtype.is_fp8 and kv.scales in (None, KvScales.CALIBRATE))
            ),
        ),
    )

    dtype: KvCacheDtype = DEFAULT_KV_DTYPE
    scales: KvScales | None = Field(
        default=None,
        description="FP8 scale source. Default for FP8: calibrate. unit must be written explicitly.",
    )
    calibration: CalibrationSpec | None = Field(
        default=None,
        description="Calibration settings. Unset for calibrated scales: the defaults below.",
    )

    @model_validator(mode="after")
    def _default_scales(self) -> Self:
        if self.dtype.is_fp8 and self.scales is None:
            self.scales = KvScales.CALIBRATE
        if self.scales is KvScales.CALIBRATE and self.calibration is None:
            self.calibration = CalibrationSpec()
        return self


def _no_owned_flags(path: str) -> Rule:
    """The engineArgs rule, with its message naming the engineArgs at `path`."""
    return Rule(
        cel=f"!has(self.engineArgs) || self.engineArgs.all(a, !a.matches('{OWNED_FLAG_PATTERN}'))",
        message=f"{path}.engineArgs must not set flags Kvant derives from the spec: --kv-cache-dtype "
        "(spec.kvCache.dtype), --tp-size (spec.serving.tensorParallel), --mem-fraction-static "
        "(spec.serving.memFractionStatic), --page-size (spec.serving.pageSize), --max-running-requests and "
        "--max-queued-requests (spec.limits), --model-path, --host, --port, --disaggregation-mode, --device "
        "(spec.serving.device), --enable-lora and the LoRA pool's flags (spec.serving.lora)",
        field_path=".engineArgs",
        holds=lambda m: not any(re.search(OWNED_FLAG_PATTERN, a) for a in m.engine_args),
    )


def _priority_abort_needs_scheduling(path: str) -> Rule:
    """The gate writes every request's class into SGLang's `priority` field (docs/concepts/tenants.md);
    an engine told to abort prioritised requests without priority scheduling would refuse them all."""
    flag, needs = "--abort-on-priority-when-disabled", "--enable-priority-scheduling"
    return Rule(
        cel=f"!has(self.engineArgs) || !self.engineArgs.exists(a, a == '{flag}') "
        f"|| self.engineArgs.exists(a, a == '{needs}')",
        message=f"{path}.engineArgs sets {flag} without {needs}: the gate gives every request its class's "
        "priority, so the engine would abort them all",
        field_path=".engineArgs",
        holds=lambda m: flag not in m.engine_args or needs in m.engine_args,
    )


def _priority_needs_its_policy() -> Rule:
    """SGLang 0.5.23 asserts --schedule-policy fcfs or lof with priority scheduling; asked for both, the
    engine would not start. (Unset, the operator leaves priority scheduling out instead.)"""
    lists = " + ".join(
        f"(has({path}.engineArgs) ? {path}.engineArgs : [])"
        for path in ("self", "self.disaggregation.prefill", "self.disaggregation.decode")
    )
    allowed = ("--schedule-policy=fcfs", "--schedule-policy=lof")

    def holds(s: ServingSpec) -> bool:
        args = [*s.engine_args, *s.disaggregation.prefill.engine_args, *s.disaggregation.decode.engine_args]
        return s.priority_scheduling is not True or all(
            not a.startswith("--schedule-policy") or a in allowed for a in args
        )

    return Rule(
        cel=f"!has(self.priorityScheduling) || !self.priorityScheduling || ({lists}).all(a, "
        f"!a.startsWith('--schedule-policy') || a in {list(allowed)})",
        message="spec.serving.priorityScheduling: true needs SGLang's --schedule-policy fcfs (its default) "
        "or lof; engineArgs may set it only as --schedule-policy=fcfs or --schedule-policy=lof",
        field_path=".priorityScheduling",
        holds=holds,
    )


def _conservativeness_once() -> Rule:
    """--schedule-conservativeness in engineArgs was the only way to set it before
    spec.serving.scheduler, so it stays accepted there (existing models keep validating); setting
    both would leave the engine with whichever came last on its command line."""
    flag = engine_scheduler.CONSERVATIVENESS.sglang
    pattern = f"^{flag}(=.*)?$"

    def passes(path: str) -> str:  # CEL: the engineArgs at `path` (each step guarded) pass the flag
        steps = path.split(".")
        guards = [f"has({'.'.join(steps[: i + 1])})" for i in range(1, len(steps))]
        return f"({' && '.join(guards)} && {path}.exists(a, a.matches('{pattern}')))"

    paths = (
        "self.engineArgs",
        "self.disaggregation.prefill.engineArgs",
        "self.disaggregation.decode.engineArgs",
    )
    return Rule(
        cel="!has(self.scheduler) || !has(self.scheduler.conservativeness) || !("
        + " || ".join(passes(path) for path in paths)
        + ")",
        message="spec.serving.scheduler.conservativeness is set and an engineArgs list passes "
        f"{flag} too: set one of them",
        field_path=".scheduler.conservativeness",
        holds=lambda s: (
            s.scheduler.conservativeness is None
            or not any(
                re.search(pattern, arg)
                for role in (s, s.disaggregation.prefill, s.disaggregation.decode)
                for arg in role.engine_args
            )
        ),
    )


def _engine_args_field() -> Any:
    return Field(
        default_factory=list,
        max_length=MAX_ENGINE_ARGS,
        description="Extra SGLang flags, passed through after Kvant's own.",
    )


class RoleSpec(ApiModel):
    """One role of prefill/decode disaggregation. Each role's subclass carries its rules, so a message
    names that role's path."""

    replicas: int = Field(default=1, ge=0, le=1024, description="Replicas of this role.")
    kv_cache_dtype: KvCacheDtype | None = Field(
        default=None,
        description="Override of spec.kvCache.dtype for this role. Both roles must end up with the same "
        "dtype: SGLang moves KV pages between them as bytes.",
    )
    engine_args: list[EngineArg] = _engine_args_field()


class PrefillRoleSpec(RoleSpec):
    """The prefill role."""

    rules = (
        _no_owned_flags("spec.serving.disaggregation.prefill"),
        _priority_abort_needs_scheduling("spec.serving.disaggregation.prefill"),
    )


class DecodeRoleSpec(RoleSpec):
    """The decode role."""

    rules = (
        _no_owned_flags("spec.serving.disaggregation.decode"),
        _priority_abort_needs_scheduling("spec.serving.disaggregation.decode"),
    )


class DisaggregationSpec(ApiModel):
    """Prefill/decode disaggregation."""

    mode: DisaggregationMode = DisaggregationMode.NONE
    prefill: PrefillRoleSpec = Field(default_factory=PrefillRoleSpec)
    decode: DecodeRoleSpec = Field(default_factory=DecodeRoleSpec)


class GpuSpec(ApiModel):
    """The GPUs of one replica (device: cuda). With engine: simulator they are simulated and not requested."""

    resource: str = Field(
        default="nvidia.com/gpu", max_length=253, description="Extended resource name requested per GPU."
    )
    memory_gib: float = Field(
        alias="memoryGiB", gt=0, le=4096, description="Memory of one GPU in GiB (H100: 80, H200: 141)."
    )
    count: int = Field(default=1, ge=1, le=64, description="GPUs per replica.")


class CpuSpec(ApiModel):
    """The memory and cores of one replica (device: cpu)."""

    memory_gib: float = Field(
        alias="memoryGiB",
        gt=0,
        le=4096,
        description="Memory of the engine container in GiB (its request and limit). The planner sizes the "
        "KV cache from it: what is left after the engine's own memory and the weights.",
    )
    cores: int = Field(default=2, ge=1, le=1024, description="CPU cores the engine container requests.")
    kv_cache_mib: int | None = Field(
        default=None,
        alias="kvCacheMiB",
        ge=1,
        le=4 << 20,
        description="KV cache size in MiB, when it should be smaller than what memoryGiB leaves. Unset: "
        "the planner gives the KV cache all that memoryGiB leaves.",
    )


class RouterPolicy(StrEnum):
    """How the router picks an engine (smg's --policy): cache_aware keeps repeated prefixes on the
    replica that holds them; least_load and power_of_two follow load; the rest are smg's own."""

    CACHE_AWARE = "cache_aware"
    POWER_OF_TWO = "power_of_two"
    LEAST_LOAD = "least_load"
    CONSISTENT_HASHING = "consistent_hashing"
    PREFIX_HASH = "prefix_hash"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"


class RouterSpec(ApiModel):
    """The model's front door: smg discovers the engine pods and routes to their gates."""

    enabled: bool | None = Field(
        default=None,
        description="Run the router. Unset: on when spec.serving.replicas > 1, spec.autoscaling.maxReplicas "
        "> 1 or prefill-decode is on.",
    )
    policy: RouterPolicy = Field(default=RouterPolicy.CACHE_AWARE, description="smg's --policy.")
    replicas: int = Field(default=2, ge=1, le=16, description="Router replicas (a PDB keeps one up).")


# A target's name, with the length bound the API server's CEL cost estimate needs under a rule.
LoraTargetName = Annotated[LoraTarget, Field(json_schema_extra={"maxLength": max(map(len, LoraTarget))})]


class LoraSpec(ApiModel):
    """The adapter pool every engine of the model reserves at start (docs/concepts/adapters.md).

    SGLang sizes the pool from these four numbers before it sizes the KV cache, so the planner takes
    the pool's bytes out of the KV budget (status.plan.loraPoolBytesPerGPU). Launch settings: an edit
    restarts the engines, replica by replica."""

    rules = (
        Rule(
            cel="!has(self.maxLoaded) || self.maxLoaded >= self.slots",
            message="spec.serving.lora.maxLoaded (adapters held in host memory) must be at least "
            "spec.serving.lora.slots (adapters on the device at once); SGLang refuses fewer",
            field_path=".maxLoaded",
            holds=lambda s: s.max_loaded is None or s.max_loaded >= s.slots,
        ),
    )

    max_rank: int = Field(
        ge=1,
        le=512,
        description="The largest LoRA rank an adapter may have (--max-lora-rank). Every slot is sized "
        "at this rank, so it sets the pool's size.",
    )
    target_modules: list[LoraTargetName] = Field(
        default_factory=lambda: list(DEFAULT_TARGETS),
        min_length=1,
        max_length=len(LoraTarget),
        description="The projections adapters may change (--lora-target-modules). SGLang keeps one "
        "buffer for q/k/v and one for gate/up, so naming one of them sizes its whole stack. Unset: "
        "every attention and MLP projection.",
    )
    slots: int = Field(
        default=DEFAULT_SLOTS,
        ge=1,
        le=64,
        description="Adapters one batch may use at once (--max-loras-per-batch). The base model takes "
        "one slot whenever a batch holds a request without an adapter.",
    )
    max_loaded: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Adapters each engine keeps in host memory (--max-loaded-loras); past it SGLang "
        "drops the least recently used. Unset: no bound.",
    )

    def envelope(self) -> LoraEnvelope:
        return LoraEnvelope(
            max_rank=self.max_rank,
            targets=tuple(dict.fromkeys(self.target_modules)),
            slots=self.slots,
            max_loaded=self.max_loaded,
        )


def _knob(knob: engine_scheduler.Knob) -> Any:
    return Field(
        default=None,
        gt=0,
        le=knob.upper,
        description=f"{knob.description} Unset: SGLang's default ({knob.default:g}). Read once when the "
        "engine starts: changing it restarts the engines, replica by replica.",
    )


class SchedulerSpec(ApiModel):
    """Each unset knob keeps SGLang's own default."""

    # Names, bounds and SGLang's defaults come from kvant_contracts.engine_scheduler, which the
    # launcher and the simulator read too.
    conservativeness: float | None = _knob(engine_scheduler.CONSERVATIVENESS)
    min_new_token_ratio_factor: float | None = _knob(engine_scheduler.MIN_NEW_TOKEN_RATIO_FACTOR)
    new_token_ratio_decay_steps: int | None = _knob(engine_scheduler.NEW_TOKEN_RATIO_DECAY_STEPS)
    clip_max_new_tokens_estimation: int | None = _knob(engine_scheduler.CLIP_MAX_NEW_TOKENS)

    def values(self) -> dict[str, float]:
        """The knobs set, by their contract (camelCase) names."""
        return {
            name: value
            for name, value in self.model_dump(by_alias=True, exclude_none=True).items()
            if name in engine_scheduler.BY_FIELD
        }


class ServingSpec(ApiModel):
    """How the model is served."""

    rules = (
        Rule(
            cel="has(self.device) && self.device == 'cpu' ? has(self.cpu) && !has(self.gpu) : "
            "has(self.gpu) && !has(self.cpu)",
            message="spec.serving: device cuda (the default) needs spec.serving.gpu and no "
            "spec.serving.cpu; device cpu needs spec.serving.cpu (memoryGiB) and no spec.serving.gpu",
            field_path=".device",
            holds=lambda s: (
                (s.cpu is not None and s.gpu is None)
                if s.device is Device.CPU
                else (s.gpu is not None and s.cpu is None)
            ),
        ),
        Rule(
            cel="!has(self.gpu) || self.gpu.count % self.tensorParallel == 0",
            message="spec.serving.tensorParallel must divide spec.serving.gpu.count (GPUs per replica = "
            "tensorParallel x data-parallel size), for example tensorParallel: 8 with gpu.count: 8",
            field_path=".tensorParallel",
            holds=lambda s: s.gpu is None or s.gpu.count % s.tensor_parallel == 0,
        ),
        Rule(
            cel="!has(self.device) || self.device != 'cpu' || (self.tensorParallel == 1 && "
            "!has(self.memFractionStatic) && "
            "(!has(self.disaggregation.mode) || self.disaggregation.mode == 'none'))",
            message="spec.serving.device cpu serves one engine process per replica, sized by "
            "spec.serving.cpu: tensorParallel must be 1, memFractionStatic unset (use cpu.kvCacheMiB) "
            "and disaggregation.mode none (scale with spec.serving.replicas)",
            field_path=".device",
            holds=lambda s: (
                s.device is not Device.CPU
                or (
                    s.tensor_parallel == 1
                    and s.mem_fraction_static is None
                    and s.disaggregation.mode is DisaggregationMode.NONE
                )
            ),
        ),
        Rule(
            cel="self.disaggregation.mode == 'none' || self.replicas == 1",
            message="spec.serving.replicas (what kubectl scale and autoscalers set) applies without "
            "disaggregation; with mode: prefill-decode set spec.serving.disaggregation.prefill.replicas "
            "and .decode.replicas instead",
            field_path=".replicas",
            holds=lambda s: s.disaggregation.mode is DisaggregationMode.NONE or s.replicas == 1,
        ),
        Rule(
            cel="!has(self.lora) || !has(self.device) || self.device != 'cpu' || "
            "(has(self.engine) && self.engine == 'simulator')",
            message="spec.serving.lora needs device cuda: SGLang 0.5.23's LoRA layers pin host memory, "
            "which its CPU backend does not have, so the engine would not start (the simulator, engine: "
            "simulator, takes an adapter pool on either device)",
            field_path=".lora",
            holds=lambda s: s.lora is None or s.device is not Device.CPU or s.engine is Engine.SIMULATOR,
        ),
        _no_owned_flags("spec.serving"),
        _priority_abort_needs_scheduling("spec.serving"),
        _conservativeness_once(),
        _priority_needs_its_policy(),
    )

    engine: Engine = Engine.SGLANG
    image: str | None = Field(
        default=None, max_length=512, description="Engine image. Unset: the operator's default."
    )
    replicas: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Serving replicas (disaggregation: none); the scale subresource's replicas.",
    )
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="Tensor-parallel size of one replica.")
    page_size: int = Field(
        default=1, ge=1, le=1024, description="KV cache page size in tokens (--page-size)."
    )
    device: Device = Device.CUDA
    gpu: GpuSpec | None = None
    cpu: CpuSpec | None = None
    mem_fraction_static: float | None = Field(
        default=None,
        ge=0.1,
        le=0.98,
        description="Fraction of GPU memory for weights and KV cache. Unset: the planner follows SGLang's "
        "own default for this GPU.",
    )
    disaggregation: DisaggregationSpec = Field(default_factory=DisaggregationSpec)
    scheduler: SchedulerSpec = Field(
        default_factory=SchedulerSpec,
        description="SGLang's own admission knobs, for every engine of the model (both roles when "
        "disaggregated). Launch settings: an edit restarts the engines, replica by replica.",
    )
    engine_args: list[EngineArg] = _engine_args_field()
    priority_scheduling: bool | None = Field(
        default=None,
        description="SGLang orders its own waiting queue by each request's class "
        "(--enable-priority-scheduling; running requests are never preempted for it). Unset: on, unless "
        "engineArgs choose a --schedule-policy other than fcfs or lof, which SGLang cannot order by "
        "priority. A launch setting: changing it restarts the engines, replica by replica.",
    )
    router: RouterSpec = Field(
        default_factory=RouterSpec,
        description="The SGLang Model Gateway (smg) in front of the engines' gates.",
    )
    placement: PlacementSpec = Field(
        default_factory=PlacementSpec,
        description="Where the engine and router pods run and how each role spreads over nodes and zones.",
    )
    lora: LoraSpec | None = Field(
        default=None,
        description="An adapter pool in every engine, for LoRA adapters loaded while it runs. Unset: "
        "no pool, and no memory set aside for one.",
    )

    @property
    def gpus(self) -> int:
        """GPUs one replica requests: 0 on CPU."""
        return self.gpu.count if self.gpu is not None else 0


# The gate's own enums, from the limits contract: the CR offers exactly what the gate understands.
OversizeRequests = Oversize
# The gate's defaults, from the same contract: a field left out of the CR means what it means to the
# gate. The CRD's `default:`s and the reference are generated from these values.
GATE_DEFAULTS = Limits()


class LimitsSpec(ApiModel):
    """The on-call knobs, enforced by the gate; editing them never restarts the engine."""

    max_concurrency: int = Field(
        default=GATE_DEFAULTS.maxConcurrency,
        ge=1,
        le=100000,
        description="Requests running at once per replica.",
    )
    max_queued: int = Field(
        default=GATE_DEFAULTS.maxQueued,
        ge=0,
        le=1000000,
        description="Requests waiting per replica before 429.",
    )
    # Whole seconds in the CR; the contract's float holds them exactly (a test compares the two).
    queue_timeout_seconds: int = Field(
        default=int(GATE_DEFAULTS.queueTimeoutSeconds),
        ge=1,
        le=3600,
        description="Longest wait in the queue.",
    )
    default_max_tokens: int = Field(
        default=GATE_DEFAULTS.defaultMaxTokens,
        ge=1,
        le=1048576,
        description="Output tokens reserved for a request that sets no limit (an OpenAI chat request "
        "without max_tokens would otherwise generate up to the context length); the gate writes this "
        "limit into the request it forwards.",
    )
    admission: AdmissionMode = Field(
        default=GATE_DEFAULTS.admission,
        description="How the gate decides a request may start. engine (the default): on the engine's own "
        "state, keeping its waiting queue short but never empty and letting SGLang reserve KV as it does "
        "anyway, while retractions narrow the effective concurrency. Or the gate reserves KV itself, a "
        "second time: the prompt plus a forecast of the output learned from recent answers (forecast), or "
        "the whole output limit (worstCase: the engine never retracts, but fewer requests are admitted when "
        "answers end early). See docs/concepts/admission.md.",
    )
    forecast_quantile: float = Field(
        default=GATE_DEFAULTS.forecastQuantile,
        gt=0.0,
        le=1.0,
        description="With forecast admission: how sure the reservations are to cover the in-flight answers' "
        "total (each sequence reserves the mean of recent output lengths, and the budget keeps a margin for "
        "their spread at this quantile; 1.0 reads as 0.9999).",
    )
    oversize_requests: OversizeRequests = Field(
        default=GATE_DEFAULTS.oversizeRequests,
        description="A request that may hold more KV than a replica's whole budget: refuse (413, "
        "saying why) or runAlone (it waits until nothing else runs).",
    )


class ConcurrencyRangeSpec(ApiModel):
    """The range protection moves the effective concurrency in."""

    rules = (
        Rule(
            cel="!has(self.max) || self.min <= self.max",
            message="spec.protection.concurrency.min must be less than or equal to "
            "spec.protection.concurrency.max",
            field_path=".min",
            holds=lambda c: c.max is None or c.min <= c.max,
        ),
    )

    # 1, in the contract too: the only floor valid for every spec.limits.maxConcurrency (a rule keeps
    # min <= maxConcurrency, so a larger default would reject a CR that never mentions min). A model
    # whose engine should keep some throughput while protection cuts sets its own floor.
    min: int = Field(
        default=GATE_DEFAULTS.concurrency.min, ge=1, le=100000, description="Lowest effective concurrency."
    )
    max: int | None = Field(
        default=None,
        ge=1,
        le=100000,
        description="Highest effective concurrency. Unset: spec.limits.maxConcurrency.",
    )


class MetricsSpec(ApiModel):
    """Where protection reads engine and gate metrics."""

    prometheus_url: str | None = Field(
        default=None,
        alias="prometheusURL",
        max_length=1024,
        pattern=r"^https?://",
        description="Prometheus base URL. Unset: scrape the pods directly.",
    )
    interval_seconds: int = Field(
        default=15, ge=1, le=600, description="Seconds between protection decisions."
    )


class ProtectionSpec(ApiModel):
    """Live KV cache protection: lowers the effective concurrency before the engine retracts requests."""

    mode: ProtectionMode = ProtectionMode(GATE_DEFAULTS.mode)
    target_token_usage: float = Field(
        default=GATE_DEFAULTS.targetTokenUsage,
        gt=0,
        le=1,
        description=f"KV cache usage (0-1, like {TOKEN_USAGE}) at which a replica counts as full: the "
        "router sends new requests to other replicas first, and KvantKVCacheOverTarget fires when a replica "
        "stays above it while requests wait. A full cache is not a reason to narrow: only retractions are.",
    )
    max_retractions_per_minute: int = Field(
        default=GATE_DEFAULTS.maxRetractionsPerMinute,
        ge=0,
        le=100000,
        description="Retractions per minute tolerated before concurrency is lowered (the engine's "
        f"retractions over the last {RETRACTION_WINDOW_SECONDS:g} s, by the gate and by protection alike).",
    )
    concurrency: ConcurrencyRangeSpec = Field(default_factory=ConcurrencyRangeSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)


class EvaluationSpec(ApiModel):
    """An accuracy gate run on the converted model before traffic moves to it."""

    suite: Literal["builtin-kl"] = Field(
        default="builtin-kl", description="builtin-kl: KL divergence against the source on bundled prompts."
    )
    max_kl_divergence: float = Field(
        default=0.02, alias="maxKLDivergence", gt=0, le=10, description="Largest mean KL divergence accepted."
    )
    block_rollout: bool = Field(
        default=True, description="Keep the previous artifact serving when the gate fails."
    )


def _effective_role_dtype(role: RoleSpec, kv: KvCacheSpec) -> KvCacheDtype:
    return role.kv_cache_dtype or kv.dtype


class AccessSpec(ApiModel):
    """Who may use the model's endpoint beyond generating. Both Secrets are optional, live in the
    model's namespace, and are read by the kubelet for the serving pods only, never by the operator."""

    admin_token_secret: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Secret whose key `token` opens SGLang's admin routes (weights updates, cache flush, "
        "profiling, ...) at the gate for `Authorization: Bearer <token>`; SGLang gets it as "
        "--admin-api-key too. Unset: admin routes are closed.",
    )
    api_keys_secret: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Secret whose key `keys` lists client API keys, one per line; the gate then requires "
        "`Authorization: Bearer <key>` (as OpenAI clients send it) on every route but health and metrics, "
        "and answers 401 otherwise. Unset: no key is needed.",
    )


class AutoscalingSpec(ApiModel):
    """Replicas that follow demand. The operator renders a HorizontalPodAutoscaler on this model's
    scale subresource, driven by the custom metric `kvant_demand`: each gate's KV tokens reserved and
    queued over its budget (or requests over its effective concurrency, whichever is larger), plus the
    share it refused. The cluster needs the custom metrics API (prometheus-adapter with Kvant's rule;
    see docs/concepts/autoscaling.md); status.autoscaling says when it is missing. Leave spec.serving.replicas
    out of Git (or ignore it in Argo CD/Flux): the autoscaler sets it."""

    rules = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="spec.autoscaling.minReplicas must not exceed spec.autoscaling.maxReplicas",
            field_path=".minReplicas",
            holds=lambda a: a.min_replicas <= a.max_replicas,
        ),
    )

    min_replicas: int = Field(default=1, ge=1, le=1024, description="The fewest serving replicas.")
    max_replicas: int = Field(ge=1, le=1024, description="The most serving replicas.")
    target_demand: float = Field(
        default=DEFAULT_TARGET_DEMAND,
        ge=0.1,
        le=4.0,
        description="The average demand per replica the autoscaler keeps (1.0: every replica exactly "
        "full); below 1 leaves headroom for a burst while a new replica starts.",
    )
    scale_up_stabilization_seconds: int = Field(
        default=DEFAULT_SCALE_UP_STABILIZATION_SECONDS,
        ge=0,
        le=3600,
        description="How long demand must stay high before replicas are added (the HPA's window).",
    )
    scale_down_stabilization_seconds: int = Field(
        default=DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
        ge=0,
        le=3600,
        description="How long demand must stay low before replicas are removed (the HPA's window).",
    )


# The gate's tenancy defaults, from the tenancy contract (like GATE_DEFAULTS for the limits).
TENANCY_DEFAULTS = Tenancy()
Priority = StrEnum("Priority", {p.upper(): p for p in PRIORITIES})  # type: ignore[misc]
Priority.__doc__ = "A request's priority class: critical is served first and refused last."
TenantName = Annotated[str, Field(pattern=TENANT_NAME.pattern, max_length=63)]


class TenantSpec(ApiModel):
    """One tenant: its class and its share. Requests name their tenant by API key (a line of the
    spec.access.apiKeysSecret file: `<key> tenant=<name> [priority=<class>] [trusted]`), or by the
    X-Kvant-Tenant header when sent with a key marked `trusted` (a gateway's)."""

    rules = (
        Rule(
            cel=f"self.name != '{OTHER_TENANTS}'",
            message=f"spec.tenancy.tenants[].name {OTHER_TENANTS!r} is reserved for the metrics' bucket "
            "of tenants past the top 10; pick another name",
            field_path=".name",
            holds=lambda t: t.name != OTHER_TENANTS,
        ),
    )

    name: TenantName = Field(description=f"The tenant's name ({DEFAULT_TENANT!r}: requests naming none).")
    priority: Priority | None = Field(
        default=None, description="Its class. Unset: spec.tenancy.defaultPriority."
    )
    weight: float = Field(
        default=1.0, gt=0, le=1000, description="Its share of the cache against the others in its class."
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="At most this many tokens (prompt + reserved output) admitted per minute, on each "
        "replica; past it, 429 with Retry-After. Unset: no rate limit.",
    )


class TenancySpec(ApiModel):
    """Many tenants on one protected cache. Under pressure the gate serves critical work first and
    refuses sheddable work first, shares the token budget fairly between the tenants of a class (a
    virtual token counter over prompt plus weighted output tokens), and refuses at once a request that
    cannot start within its deadline (the queue timeout, or the client's X-Kvant-Deadline-Ms). Edits
    apply live, like the other limits."""

    rules = (
        Rule(
            cel="!has(self.tenants) || self.tenants.all(t, self.tenants.exists_one(u, u.name == t.name))",
            message="spec.tenancy.tenants[].name must be unique",
            field_path=".tenants",
            holds=lambda t: len({x.name for x in t.tenants}) == len(t.tenants),
        ),
    )

    default_priority: Priority = Field(
        default=Priority(TENANCY_DEFAULTS.defaultPriority),
        description="The class of requests whose tenant names none.",
    )
    tenants: list[TenantSpec] = Field(default_factory=list, max_length=64, description="Named tenants.")
    output_token_weight: float = Field(
        default=TENANCY_DEFAULTS.outputTokenWeight,
        ge=0,
        le=100,
        description="What an output token costs in the fair-share counter, in prompt tokens.",
    )
    sheddable_queue_share: float = Field(
        default=TENANCY_DEFAULTS.sheddableQueueShare,
        ge=0,
        le=1,
        description="The share of spec.limits.maxQueued sheddable work may fill.",
    )
    critical_reserve: float = Field(
        default=TENANCY_DEFAULTS.criticalReserve,
        ge=0,
        lt=1,
        description="The share of the concurrency and token budget held back from standard and "
        "sheddable work while critical work is queued or in flight.",
    )


class QuantizedModelSpec(ApiModel):
    """Desired state of a QuantizedModel."""

    rules = (
        Rule(
            cel="self.serving.disaggregation.mode != 'prefill-decode' || "
            "(has(self.serving.disaggregation.prefill.kvCacheDtype) ? "
            "self.serving.disaggregation.prefill.kvCacheDtype : self.kvCache.dtype) == "
            "(has(self.serving.disaggregation.decode.kvCacheDtype) ? "
            "self.serving.disaggregation.decode.kvCacheDtype : self.kvCache.dtype)",
            message="spec.serving.disaggregation: prefill and decode must use the same KV cache dtype "
            "(SGLang moves KV pages between them as bytes); set prefill.kvCacheDtype and "
            "decode.kvCacheDtype to the same value, or remove both to use spec.kvCache.dtype",
            field_path=".serving.disaggregation.decode.kvCacheDtype",
            holds=lambda s: (
                s.serving.disaggregation.mode is not DisaggregationMode.PREFILL_DECODE
                or _effective_role_dtype(s.serving.disaggregation.prefill, s.kv_cache)
                == _effective_role_dtype(s.serving.disaggregation.decode, s.kv_cache)
            ),
        ),
        Rule(
            cel="!has(self.protection.concurrency.max) || "
            "self.protection.concurrency.max <= self.limits.maxConcurrency",
            message="spec.protection.concurrency.max must not exceed spec.limits.maxConcurrency: "
            "protection only lowers the limit; raise spec.limits.maxConcurrency instead",
            field_path=".protection.concurrency.max",
            holds=lambda s: (
                s.protection.concurrency.max is None
                or s.protection.concurrency.max <= s.limits.max_concurrency
            ),
        ),
        Rule(
            cel="!has(self.serving.device) || self.serving.device != 'cpu' || "
            f"self.kvCache.dtype != '{KvCacheDtype.FP8_E5M2}'",
            message=f"spec.kvCache.dtype {KvCacheDtype.FP8_E5M2} cannot serve on spec.serving.device cpu: "
            f"{CPU_E5M2_REASON}",
            field_path=".kvCache.dtype",
            holds=lambda s: (
                s.serving.device is not Device.CPU or s.kv_cache.dtype is not KvCacheDtype.FP8_E5M2
            ),
        ),
        Rule(
            cel="!has(self.autoscaling) || self.serving.disaggregation.mode == 'none'",
            message="spec.autoscaling scales spec.serving.replicas, which applies without "
            "disaggregation; with mode: prefill-decode set the roles' replicas by hand (autoscaling "
            "each role is not built yet)",
            field_path=".autoscaling",
            holds=lambda s: s.autoscaling is None or s.serving.disaggregation.mode is DisaggregationMode.NONE,
        ),
        Rule(
            # Bounds that contradict each other are the minReplicas rule's to report, alone.
            cel="!has(self.autoscaling) || self.autoscaling.minReplicas > self.autoscaling.maxReplicas || "
            "(self.serving.replicas >= self.autoscaling.minReplicas && "
            "self.serving.replicas <= self.autoscaling.maxReplicas)",
            message="spec.serving.replicas must lie within spec.autoscaling.minReplicas and "
            "maxReplicas: the autoscaler would move it back at once (it defaults to 1; set it inside "
            "the bounds, and leave it out of Git so the autoscaler owns it)",
            field_path=".serving.replicas",
            holds=lambda s: (
                s.autoscaling is None
                or s.autoscaling.min_replicas > s.autoscaling.max_replicas
                or s.autoscaling.min_replicas <= s.serving.replicas <= s.autoscaling.max_replicas
            ),
        ),
        Rule(
            cel="self.protection.concurrency.min <= self.limits.maxConcurrency",
            message="spec.protection.concurrency.min must not exceed spec.limits.maxConcurrency",
            field_path=".protection.concurrency.min",
            holds=lambda s: s.protection.concurrency.min <= s.limits.max_concurrency,
        ),
    )

    source: SourceSpec
    weights: WeightsSpec = Field(default_factory=WeightsSpec)
    kv_cache: KvCacheSpec = Field(default_factory=KvCacheSpec)
    serving: ServingSpec
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    protection: ProtectionSpec = Field(default_factory=ProtectionSpec)
    evaluation: EvaluationSpec | None = Field(default=None, description="Accuracy gate. Unset: no gate.")
    access: AccessSpec = Field(default_factory=AccessSpec)
    tenancy: TenancySpec = Field(
        default_factory=TenancySpec,
        description="Priorities, fair shares and deadlines among the tenants of this model.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        default=None, description="Unset: spec.serving.replicas stays as set."
    )

    def check_update(self, old: QuantizedModelSpec) -> None:
        """Raises SpecError when an update from `old` would be rejected by the API server."""
        self.source.check_transition(old.source)
