"""The capacity plan: from a checkpoint and a serving request to weights, KV tokens and concurrency.

`CapacityPlan` is the one result type: `kvant plan --json` prints it (snake_case), the operator
writes its summary to `status.plan` (camelCase), and the simulator reads the JSON with `--plan`.
What is planned for is a `PlanRequest` (plan_request.py).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_contracts.launch_spec import Device
from kvant_contracts.weights_recipe import DEFAULT_GROUP_SIZE, effective_weights
from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.api.status import PlannedWeights, PlanStatus
from kvant_operator.planner.architecture import Attention, ModelShape
from kvant_operator.planner.calibration_sizing import count_parameters
from kvant_operator.planner.capacity import (
    CPU_ENGINE_RESERVE_BYTES,
    GIB,
    MIB,
    RUNTIME_RESERVE_BYTES,
    kv_bytes_per_token_per_gpu,
    kv_dtype_bytes,
    kv_tokens_on_cpu,
    kv_tokens_per_gpu,
    max_concurrency,
    sglang_default_mem_fraction_static,
)
from kvant_operator.planner.checkpoint_view import Checkpoint
from kvant_operator.planner.gptq_sizing import GptqWork, gptq_work
from kvant_operator.planner.lora_pool import LoraPool, lora_pool
from kvant_operator.planner.plan_request import DEFAULT_CONTEXTS, PlanRequest
from kvant_operator.planner.weights import Conversion, WeightSizes, size_weights

__all__ = ["DEFAULT_CONTEXTS", "CapacityPlan", "PlanRequest", "compare", "make_plan"]


class CapacityPlan(BaseModel):
    """Capacity of one replica. Byte counts are exact integers; max_concurrency maps context → requests."""

    model_config = ConfigDict(frozen=True)

    architecture: str
    attention: Attention
    inventory: str
    tensor_parallel: int
    data_parallel: int
    gpu_memory_bytes: int
    source_format: WeightFormat
    weights_format: WeightFormat
    group_size: int | None
    targets: QuantTargets | None
    kv_cache_dtype: KvCacheDtype
    moe: bool = False  # the source has routed experts (what unset targets default by)
    kv_bytes_per_token_per_gpu: int
    source_checkpoint_bytes: int
    checkpoint_bytes: int
    weight_bytes_per_gpu: int
    lora_pool_bytes_per_gpu: int | None = None  # None: no adapter pool
    mem_fraction_static: float
    mem_fraction_static_source: str  # "sglang-default" or "spec"
    page_size: int
    kv_tokens_per_replica: int
    max_concurrency: dict[int, int]
    fits: bool
    warnings: list[str]
    refusal: str | None = None  # why no engine can start with this plan (see `refusal` below)
    parameters: int = 0
    active_parameters: int = 0
    num_layers: int = 0
    hidden_size: int = 0
    gptq_hessian_flops_per_token: float = 0.0  # what GPTQ would cost (planner/gptq_sizing.py)
    gptq_solve_flops: float = 0.0
    gptq_hessian_bytes_per_layer: int = 0

    def to_status(self) -> PlanStatus:
        return PlanStatus(
            kv_cache_dtype=self.kv_cache_dtype,
            source_bytes=self.source_checkpoint_bytes,
            kvBytesPerTokenPerGPU=self.kv_bytes_per_token_per_gpu,
            weightBytesPerGPU=self.weight_bytes_per_gpu,
            loraPoolBytesPerGPU=self.lora_pool_bytes_per_gpu,
            kv_tokens_per_replica=self.kv_tokens_per_replica,
            mem_fraction_static=self.mem_fraction_static,
            page_size=self.page_size,
            max_concurrency={str(k): v for k, v in self.max_concurrency.items()},
            fits=self.fits,
            refusal=self.refusal,
            warnings=self.warnings[:16],
            parameters=self.parameters,
            active_parameters=self.active_parameters,
            layers=self.num_layers,
            architecture=self.architecture,
            hidden_size=self.hidden_size,
            weights=PlannedWeights(
                format=self.weights_format,
                group_size=self.group_size,
                targets=self.targets,
                moe=self.moe,
                hessian_flops_per_token=self.gptq_hessian_flops_per_token,
                solve_flops=self.gptq_solve_flops,
                hessian_bytes_per_layer=self.gptq_hessian_bytes_per_layer,
            ),
        )


def make_plan(checkpoint: Checkpoint, request: PlanRequest, *, span_nodes: bool = True) -> CapacityPlan:
    """The plan for `request`; with `span_nodes`, a refusal for weights that leave no KV cache
    also says how many nodes would hold the model (`_with_nodes`, which plans those without it)."""
    shape, tp = checkpoint.shape, request.tensor_parallel
    gpus = request.gpus or tp
    source = checkpoint.source_format
    conversion = _conversion(shape, source, request)
    sizes = size_weights(checkpoint.inventory, conversion, tp, shape.num_layers)
    cell = kv_bytes_per_token_per_gpu(shape, tp, kv_dtype_bytes(request.kv_cache_dtype, shape.dtype_bytes))
    gpu_bytes = int(request.gpu_memory_gib * GIB)
    pool = lora_pool(shape, request.lora, tp) if request.lora is not None else LoraPool(0)
    # SGLang measures the KV budget after the weights and the adapter pool are in memory.
    before_kv = sizes.bytes_per_gpu + pool.bytes_per_gpu
    if request.device is Device.CPU:
        kv_bytes = request.kv_cache_mib * MIB if request.kv_cache_mib else None
        tokens = kv_tokens_on_cpu(gpu_bytes, before_kv, cell, request.page_size, kv_bytes)
        # SGLang's --mem-fraction-static is not set on CPU; this is the memory share weights and KV take.
        mfs = min(1.0, round((before_kv + tokens * cell) / gpu_bytes, 3))
    else:
        mfs = request.mem_fraction_static or sglang_default_mem_fraction_static(request.gpu_memory_gib, tp)
        tokens = gpus // tp * kv_tokens_per_gpu(gpu_bytes, before_kv, mfs, cell, request.page_size)
    concurrency = {c: max_concurrency(tokens, c, request.page_size) for c in request.contexts}
    warnings = _warnings(
        shape=shape,
        request=request,
        sizes=sizes,
        conversion=conversion,
        gpu_bytes=gpu_bytes,
        mfs=mfs,
        tokens=tokens,
    )
    if pool.refusal is not None:
        warnings.insert(0, pool.refusal)
    elif pool.bytes_per_gpu and _weights_overflow(before_kv, gpu_bytes, mfs, request.device):
        warnings.insert(
            0,
            f"the adapter pool takes {pool.bytes_per_gpu / GIB:.2f} GiB per GPU and leaves no room for a KV "
            "cache beside the weights: lower spec.serving.lora.maxRank or spec.serving.lora.slots",
        )
    quantized = conversion.format in (WeightFormat.INT4, WeightFormat.FP8)
    parameters = count_parameters(checkpoint.inventory, shape)
    gptq = (  # GPTQ rounds INT4 only
        gptq_work(checkpoint.inventory, shape, conversion.rule)
        if conversion.format is WeightFormat.INT4 and source is not WeightFormat.INT4
        else GptqWork()
    )
    return CapacityPlan(
        parameters=parameters.total,
        active_parameters=parameters.active,
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        gptq_hessian_flops_per_token=gptq.hessian_flops_per_token,
        gptq_solve_flops=gptq.solve_flops,
        gptq_hessian_bytes_per_layer=gptq.hessian_bytes_per_layer,
        architecture=shape.architecture,
        attention=shape.attention,
        inventory=checkpoint.inventory.origin,
        tensor_parallel=tp,
        data_parallel=max(1, gpus // tp),
        gpu_memory_bytes=gpu_bytes,
        source_format=source,
        weights_format=conversion.format,
        group_size=conversion.group_size if conversion.format is WeightFormat.INT4 else None,
        targets=conversion.targets if quantized and conversion.format is not source else None,
        moe=shape.moe is not None,
        kv_cache_dtype=request.kv_cache_dtype,
        kv_bytes_per_token_per_gpu=cell,
        source_checkpoint_bytes=checkpoint.inventory.nbytes,
        checkpoint_bytes=sizes.checkpoint_bytes,
        weight_bytes_per_gpu=sizes.bytes_per_gpu,
        lora_pool_bytes_per_gpu=pool.bytes_per_gpu if request.lora is not None else None,
        mem_fraction_static=mfs,
        mem_fraction_static_source=_mfs_source(request),
        page_size=request.page_size,
        kv_tokens_per_replica=tokens,
        max_concurrency=concurrency,
        fits=tokens >= max(request.contexts)
        and pool.refusal is None
        and not _weights_overflow(before_kv, gpu_bytes, mfs, request.device),
        warnings=warnings,
        refusal=_with_nodes(refusal(pool, tokens, warnings), checkpoint, request, pool, tokens)
        if span_nodes
        else refusal(pool, tokens, warnings),
    )


def refusal(pool: LoraPool, tokens: int, warnings: list[str]) -> str | None:
    """Why no engine can start with this plan, or None. A plan that does not fit its longest context
    still serves shorter requests; one with no KV cache left, or an adapter pool the planner cannot
    size, would start no engine (SGLang refuses a KV cache of 0 tokens), so serving waits for an edit."""
    if pool.refusal is not None:
        return pool.refusal
    if tokens < 1:
        why = warnings[0] if warnings else "nothing is left for the KV cache"
        return f"no KV cache fits beside the weights: {why}"
    return None


# The most nodes the planner looks across when one node's GPUs cannot hold the weights.
MAX_NODES = 8


def _with_nodes(
    why: str | None, checkpoint: Checkpoint, request: PlanRequest, pool: LoraPool, tokens: int
) -> str | None:
    """A refusal for weights that leave no KV cache, told how many nodes of these GPUs would hold
    the model (tensor parallel across them, as SGLang's --nnodes runs it), since Kvant serves one
    node per replica today (multi-node serving is not built)."""
    if why is None or tokens >= 1 or pool.refusal is not None or request.device is Device.CPU:
        return why
    gpus = request.gpus or request.tensor_parallel
    for nodes in range(2, MAX_NODES + 1):
        wider = replace(
            request, tensor_parallel=request.tensor_parallel * nodes, gpus=gpus * nodes, lora=None
        )
        if (
            checkpoint.shape.num_attention_heads % wider.tensor_parallel == 0
            and make_plan(checkpoint, wider, span_nodes=False).kv_tokens_per_replica >= 1
        ):
            return (
                f"{why}; the model would fit on {nodes} nodes of {gpus} such GPUs (tensorParallel "
                f"{wider.tensor_parallel} across them), which needs multi-node serving, not built yet"
            )
    return why


def compare(checkpoint: Checkpoint, request: PlanRequest) -> list[CapacityPlan]:
    """The requested plan first, then source and INT4 weights each with BF16 and FP8 KV."""
    variants = [request] + [
        replace(request, weights_format=fmt, kv_cache_dtype=kv)
        for fmt in (None, WeightFormat.INT4)
        for kv in (KvCacheDtype.BF16, KvCacheDtype.FP8_E4M3)
    ]
    plans: list[CapacityPlan] = []
    for variant in variants:
        plan = make_plan(checkpoint, variant)
        if all(
            (p.weights_format, p.kv_cache_dtype) != (plan.weights_format, plan.kv_cache_dtype) for p in plans
        ):
            plans.append(plan)
    return plans


def _conversion(shape: ModelShape, source: WeightFormat, request: PlanRequest) -> Conversion:
    served = request.weights_format or source
    recipe = effective_weights(
        served.value,
        group_size=request.group_size,
        targets=request.targets.value if request.targets else None,
        converts=served is not source and served in (WeightFormat.INT4, WeightFormat.FP8),
        moe=shape.moe is not None,
    )
    return Conversion(
        format=served,
        group_size=recipe.group_size or DEFAULT_GROUP_SIZE,  # sizes nothing outside INT4
        targets=QuantTargets(recipe.targets) if recipe.targets else QuantTargets.ALL_LINEAR,
        ignore=request.ignore,
    )


def _mfs_source(request: PlanRequest) -> str:
    if request.device is Device.CPU:
        return "cpu-memory"
    return "spec" if request.mem_fraction_static else "sglang-default"


def _weights_overflow(before_kv: int, gpu_bytes: int, mfs: float, device: Device) -> bool:
    """Whether the weights (and the adapter pool) leave no room for a KV cache."""
    if device is Device.CPU:
        return before_kv >= gpu_bytes - CPU_ENGINE_RESERVE_BYTES
    return before_kv >= (gpu_bytes - RUNTIME_RESERVE_BYTES) * mfs


def _warnings(
    *,
    shape: ModelShape,
    request: PlanRequest,
    sizes: WeightSizes,
    conversion: Conversion,
    gpu_bytes: int,
    mfs: float,
    tokens: int,
) -> list[str]:
    tp, warnings = request.tensor_parallel, []
    if request.device is Device.CPU and _weights_overflow(
        sizes.bytes_per_gpu, gpu_bytes, mfs, request.device
    ):
        warnings.append(
            f"weights need {sizes.bytes_per_gpu / GIB:.1f} GiB but spec.serving.cpu.memoryGiB "
            f"{gpu_bytes / GIB:g} leaves {(gpu_bytes - CPU_ENGINE_RESERVE_BYTES) / GIB:.1f} GiB after the "
            f"engine's own {CPU_ENGINE_RESERVE_BYTES // GIB} GiB: raise spec.serving.cpu.memoryGiB"
        )
    elif _weights_overflow(sizes.bytes_per_gpu, gpu_bytes, mfs, request.device):
        budget = (gpu_bytes - RUNTIME_RESERVE_BYTES) * mfs
        warnings.append(
            f"weights need {sizes.bytes_per_gpu / GIB:.1f} GiB per GPU but mem_fraction_static {mfs} leaves "
            f"{budget / GIB:.1f} GiB for weights and KV cache: use int4 weights, a larger tensorParallel, "
            "or bigger GPUs"
        )
    elif tokens < max(request.contexts):
        warnings.append(
            f"the KV cache holds {tokens} tokens per replica, fewer than one request at "
            f"{max(request.contexts)} tokens: use an FP8 KV cache, int4 weights, or a larger tensorParallel"
        )
    if shape.num_attention_heads % tp:
        warnings.append(
            f"num_attention_heads {shape.num_attention_heads} is not divisible by tensorParallel {tp}; "
            "SGLang will not start"
        )
    too_long = [c for c in request.contexts if shape.max_context and c > shape.max_context]
    if too_long:
        warnings.append(
            f"context {', '.join(map(str, too_long))} exceeds the model's max_position_embeddings "
            f"{shape.max_context}"
        )
    if sizes.indivisible_tensors:
        warnings.append(
            f"{sizes.indivisible_tensors} target tensors have an input dimension not divisible by groupSize "
            f"{conversion.group_size}; the last group of each is padded"
        )
    return warnings
