"""How big a calibration run is, and where it runs: CPU for small models, GPUs for large ones.

Calibration runs the model forward over `samples x sequenceLength` tokens, one decoder layer at a
time (the calibrator streams layers: memory is one layer plus the activations of every sample).
Its cost is about 2 FLOPs per active parameter per token, where a MoE model's active parameters
count only the routed experts a token passes through (num_experts_per_tok of n_routed_experts).

The device follows the estimate: a run the CPU finishes within `CPU_BUDGET_S` stays on CPU (the
tiny model, a 1-3 B model with few samples); anything bigger asks for a GPU. One: the calibrator
streams layers on one device, so a layer and its activations must fit one GPU, and the plan warns
when they do not (fewer samples or shorter sequences fit; the scales converge well before 512).

A Kimi-K2-sized model (~32 B active parameters) over llm-compressor's
recipe of 512 x 2,048 tokens is ~7e16 FLOPs: a week for one CPU pod, about 6 minutes on one H200.

The throughputs are stated assumptions, not measurements of a given cluster: `CPU_FLOPS` is what a
calibration pod's few cores sustain in torch bf16 matmuls; `GPU_FLOPS` a data-centre GPU's bf16
rate well below peak, since layer streaming also waits on reading weights. The ETA is a guide for
status, not a deadline.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvant_contracts.int4_artifact import is_routed_expert
from kvant_operator.api.spec import CalibrationSpec, QuantizedModelSpec
from kvant_operator.api.status import CalibratedRun, PlanStatus
from kvant_operator.artifact_recipe import needs_calibration
from kvant_operator.planner.architecture import ModelShape
from kvant_operator.planner.inventory import Inventory

CPU_FLOPS = 1e11
GPU_FLOPS = 2e14
CPU_BUDGET_S = 3600.0
GPU_HEADROOM = 0.85  # of a GPU's memory, for torch's allocator and the KV taps
CALIBRATION_WARNING = "calibration holds"  # how the plan's calibration warning starts
_EMBEDDING = re.compile(r"(^|\.)embed_tokens\.")


@dataclass(frozen=True)
class Parameters:
    total: int
    active: int  # what one token passes through: routed experts scaled by experts_per_token / experts


def count_parameters(inventory: Inventory, shape: ModelShape) -> Parameters:
    """Parameters from the tensor inventory; embeddings are a lookup, so they cost no FLOPs."""
    total = routed = embedding = 0
    for tensor in inventory.tensors:
        n = tensor.numel
        total += n
        if is_routed_expert(tensor.name):
            routed += n
        elif _EMBEDDING.search(tensor.name):
            embedding += n
    share = shape.moe.experts_per_token / shape.moe.num_experts if shape.moe and routed else 1.0
    return Parameters(total, int(total - embedding - routed + routed * share))


def calibration_plan(plan: PlanStatus, spec: QuantizedModelSpec) -> CalibratedRun:
    """Where the calibration run goes and how long it takes, from the plan and the spec's recipe."""
    calibration = spec.kv_cache.calibration or CalibrationSpec()
    tokens = calibration.samples * calibration.sequence_length
    flops = 2.0 * plan.active_parameters * tokens
    return sized_run(flops, calibration.samples, calibration.sequence_length, spec)


def sized_run(flops: float, samples: int, sequence_length: int, spec: QuantizedModelSpec) -> CalibratedRun:
    """A calibrated run of `flops` placed by the one rule calibration and GPTQ share: the CPU while it
    finishes within the budget, else one GPU, and never a GPU for a CPU-served model (it has none)."""
    device, gpus, rate = "cpu", 0, CPU_FLOPS
    if flops / CPU_FLOPS > CPU_BUDGET_S and spec.serving.gpu is not None:
        device, gpus, rate = "cuda", 1, GPU_FLOPS
    return CalibratedRun(
        device=device,
        gpus=gpus,
        flops=flops,
        eta_seconds=math.ceil(flops / rate),
        samples=samples,
        sequence_length=sequence_length,
    )


def calibration_memory_bytes(plan: PlanStatus, calibration: CalibratedRun) -> int:
    """One layer in bf16 (the calibrator dequantizes a layer at a time) plus bf16 hidden states in and
    out of it for every sample: what the calibration device must hold at once."""
    layer = 2 * plan.parameters // max(1, plan.layers)
    return layer + 2 * 2 * calibration.samples * calibration.sequence_length * plan.hidden_size


def calibration_warning(plan: PlanStatus, calibration: CalibratedRun, gpu_memory_bytes: int) -> str | None:
    """A warning when the calibration device cannot hold a layer and its activations."""
    need = calibration_memory_bytes(plan, calibration)
    if calibration.device != "cuda" or need <= gpu_memory_bytes * GPU_HEADROOM:
        return None
    return (
        f"{CALIBRATION_WARNING} one layer and every sample's activations ({need / 2**30:.0f} GiB) on one GPU "
        f"of {gpu_memory_bytes / 2**30:.0f} GiB: lower spec.kvCache.calibration.samples or sequenceLength"
    )


def with_calibration(plan: PlanStatus, spec: QuantizedModelSpec) -> PlanStatus:
    """The plan with its calibration run sized (when one runs). The operator recomputes it on every
    pass, because the recipe (samples, sequence length) is not among the plan Job's inputs."""
    if not needs_calibration(spec):
        return plan.model_copy(update={"calibration": None})
    sizing = calibration_plan(plan, spec)
    warnings = [w for w in plan.warnings if not w.startswith(CALIBRATION_WARNING)]
    gpu = spec.serving.gpu
    warning = calibration_warning(plan, sizing, int(gpu.memory_gib * 2**30)) if gpu is not None else None
    if warning:
        warnings = [*warnings, warning][:16]
    return plan.model_copy(update={"calibration": sizing, "warnings": warnings})
