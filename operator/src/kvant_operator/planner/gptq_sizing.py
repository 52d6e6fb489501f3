"""How big a GPTQ conversion is, and where it runs: CPU for small models, GPUs for large ones.

GPTQ streams decoder layers like calibration (`kvant_runtime.gptq.model_pass`): for each layer the
`samples x sequenceLength` calibration tokens run through it twice (once to sum each quantized Linear's
inputs, once more with the rounded weights to give the next layer its inputs), then every quantized
Linear is solved. With T tokens, a Linear's `in` and `out` features, and a routed expert's share of
tokens s = num_experts_per_tok / n_routed_experts (1 for every other Linear):

    forward  = 2 passes x 2 x active parameters x T
    Hessians = sum over quantized inputs of 2 x in^2 x s x T   (an expert's gate and up read one input)
    solve    = sum over quantized Linears of in^3 + 2 x in^2 x out   (Cholesky and inverse, then the
               column-by-column error updates; every expert is solved, however few tokens it saw)

The plan Job reads the tensor inventory, so it reports the two sums that need it (`hessianFlopsPerToken`
and `solveFlops` in status.plan.weights, with the largest layer's Hessian bytes); the operator adds the
recipe's tokens on every pass, as for calibration. A Kimi-K2-sized model (routed experts quantized) over
GPTQ's default 128 x 2,048 tokens is ~8e16 FLOPs: over a week for one CPU pod, about 6 minutes on one
H200 (which cannot hold its layer and the experts' Hessians: the plan warns).

The device follows the estimate with calibration's assumptions (`CPU_FLOPS`, `GPU_FLOPS`,
`CPU_BUDGET_S`): cuda only for a GPU-served model whose CPU estimate is over the budget. GPTQ runs in
float32 on one device, which must hold one decoder layer (4 bytes a parameter), the float32 Hessian of
each quantized input of that layer (4 x in^2 bytes) and the hidden states of every sample, in and out
(2 x 4 x T x hidden size bytes); the plan warns when they do not fit one GPU.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from kvant_contracts.int4_artifact import TargetRule, is_routed_expert
from kvant_operator.api.spec import GptqSpec, QuantizedModelSpec
from kvant_operator.api.status import CalibratedRun, PlanStatus
from kvant_operator.artifact_recipe import needs_gptq
from kvant_operator.planner.architecture import ModelShape
from kvant_operator.planner.calibration_sizing import GPU_HEADROOM, sized_run
from kvant_operator.planner.inventory import Inventory

GPTQ_WARNING = "GPTQ holds"  # how the plan's GPTQ warning starts
# An expert's gate and up projections read the same tokens: GPTQ sums their inputs once.
_SHARED_EXPERT_INPUT = re.compile(r"\.(gate_proj|up_proj)\.weight$")


@dataclass(frozen=True)
class GptqWork:
    """What GPTQ costs on a checkpoint's quantized Linears, before the recipe's tokens are known."""

    hessian_flops_per_token: float = 0.0
    solve_flops: float = 0.0
    hessian_bytes_per_layer: int = 0


def gptq_work(inventory: Inventory, shape: ModelShape, rule: TargetRule) -> GptqWork:
    """The Hessian and solve sums over the Linears `rule` quantizes inside the decoder layers (weights
    outside them, MTP heads included, are rounded to nearest by the shard converter)."""
    share = shape.moe.experts_per_token / shape.moe.num_experts if shape.moe else 1.0
    inputs: dict[str, tuple[int, int, bool]] = {}  # input key → (layer, in features, routed expert)
    solve = 0.0
    for tensor in inventory.tensors:
        layer = tensor.layer
        if layer is None or layer >= shape.num_layers or not rule.quantizes(tensor.name, tensor.shape):
            continue
        out_features, in_features = tensor.shape
        solve += float(in_features) ** 3 + 2.0 * in_features**2 * out_features
        expert = is_routed_expert(tensor.name)
        key = _SHARED_EXPERT_INPUT.sub(".input", tensor.name) if expert else tensor.name
        inputs[key] = (layer, in_features, expert)
    per_token = 0.0
    layer_bytes: dict[int, int] = defaultdict(int)
    for layer, in_features, expert in inputs.values():
        per_token += 2.0 * in_features**2 * (share if expert else 1.0)
        layer_bytes[layer] += 4 * in_features**2
    return GptqWork(per_token, solve, max(layer_bytes.values(), default=0))


def gptq_plan(plan: PlanStatus, spec: QuantizedModelSpec) -> CalibratedRun:
    """Where the GPTQ conversion goes and how long it takes, from the plan and the spec's recipe."""
    gptq = spec.weights.gptq or GptqSpec()
    tokens = gptq.samples * gptq.sequence_length
    weights = plan.weights
    hessians = weights.hessian_flops_per_token if weights else 0.0
    solve = weights.solve_flops if weights else 0.0
    flops = 2 * 2.0 * plan.active_parameters * tokens + hessians * tokens + solve
    return sized_run(flops, gptq.samples, gptq.sequence_length, spec)


def gptq_memory_bytes(plan: PlanStatus, run: CalibratedRun) -> tuple[int, int, int]:
    """(one decoder layer in float32, its quantized inputs' float32 Hessians, the hidden states in and out
    of it for every sample): what the GPTQ device holds at once."""
    layer = 4 * plan.parameters // max(1, plan.layers)
    hessians = plan.weights.hessian_bytes_per_layer if plan.weights else 0
    return layer, hessians, 2 * 4 * run.samples * run.sequence_length * plan.hidden_size


def gptq_warning(plan: PlanStatus, run: CalibratedRun, gpu_memory_bytes: int) -> str | None:
    """A warning when the GPTQ device cannot hold a layer, its Hessians and the activations."""
    layer, hessians, activations = gptq_memory_bytes(plan, run)
    need = layer + hessians + activations
    if run.device != "cuda" or need <= gpu_memory_bytes * GPU_HEADROOM:
        return None
    return (
        f"{GPTQ_WARNING} one layer in float32 ({layer / 2**30:.0f} GiB), its Hessians "
        f"({hessians / 2**30:.0f} GiB) and every sample's activations ({activations / 2**30:.0f} GiB) on one "
        f"GPU of {gpu_memory_bytes / 2**30:.0f} GiB: lower spec.weights.gptq.samples or sequenceLength, "
        "quantize fewer Linears (spec.weights.ignore), or use spec.weights.method: rtn"
    )


def with_gptq(plan: PlanStatus, spec: QuantizedModelSpec) -> PlanStatus:
    """The plan with its GPTQ conversion sized (when the method in effect is gptq). Recomputed on every
    pass, because the recipe (method, samples, sequence length) is not among the plan Job's inputs."""
    warnings = [w for w in plan.warnings if not w.startswith(GPTQ_WARNING)]
    if not needs_gptq(spec):
        return plan.model_copy(update={"gptq": None, "warnings": warnings})
    sizing = gptq_plan(plan, spec)
    gpu = spec.serving.gpu
    warning = gptq_warning(plan, sizing, int(gpu.memory_gib * 2**30)) if gpu is not None else None
    if warning:
        warnings = [*warnings, warning][:16]
    return plan.model_copy(update={"gptq": sizing, "warnings": warnings})
