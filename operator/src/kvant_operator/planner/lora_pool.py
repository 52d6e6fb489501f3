"""The bytes SGLang's adapter pool takes on each GPU, which come out of the KV cache's budget.

SGLang allocates the pool when the engine starts, after the weights and before it measures what is
left for the KV cache, so the pool shrinks the KV cache byte for byte (docs/design/
adapters-research.md, section 4). For every layer and every pool buffer m, each of the `slots`
slots holds an A matrix of (c_m · rank) by in_m and a B matrix of out_m by rank, in the model's own
dtype, with c_m = 3 for qkv_proj, 2 for gate_up_proj, 1 otherwise; under tensor parallelism the
row-parallel A (o_proj, down_proj) keeps its rank's share of in_m and the column-parallel B its
share of out_m. tests/unit/test_lora_envelope.py holds this to SGLang 0.5.23's own shape functions.

Dense GQA/MHA models only: on MLA the attention projections have other names, and on a model with
routed experts the MLP targets are expert buffers sized per expert. Both are refused here, in the
plan's warnings, before an engine could start with a pool the planner did not size.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvant_contracts.lora import MLP_BUFFERS, LoraEnvelope, LoraTarget, normalized
from kvant_operator.planner.architecture import Attention, ModelShape


@dataclass(frozen=True)
class LoraPool:
    """The pool on one GPU: its bytes, or why the planner cannot size it (`refusal`, bytes 0)."""

    bytes_per_gpu: int
    refusal: str | None = None


def lora_pool(shape: ModelShape, envelope: LoraEnvelope, tensor_parallel: int) -> LoraPool:
    buffers = normalized(envelope.targets)
    if shape.attention is Attention.MLA:
        return LoraPool(
            0,
            f"spec.serving.lora: {shape.architecture} has MLA attention, whose projections are not "
            f"{', '.join(sorted(t.value for t in buffers))}; the planner sizes adapter pools of GQA/MHA "
            "models only",
        )
    experts = buffers & MLP_BUFFERS
    if shape.moe is not None and experts:
        return LoraPool(
            0,
            f"spec.serving.lora.targetModules: {shape.architecture} has routed experts, and "
            f"{', '.join(sorted(t.value for t in experts))} there are expert buffers the planner does not "
            "size; target the attention projections (q_proj, k_proj, v_proj, o_proj) only",
        )
    width = sum(_a_and_b_per_rank(shape, buffer, tensor_parallel) for buffer in buffers)
    return LoraPool(shape.dtype_bytes * envelope.slots * envelope.max_rank * shape.num_layers * width)


def _a_and_b_per_rank(shape: ModelShape, buffer: LoraTarget, tp: int) -> int:
    """c · in + out of one buffer on one rank, per unit of rank and slot."""
    hidden, heads, head_dim = shape.hidden_size, shape.num_attention_heads, shape.head_dim
    if buffer is LoraTarget.QKV_PROJ:
        q_out, kv_out = heads * head_dim, 2 * shape.num_kv_heads * head_dim
        # Fewer KV heads than ranks: each rank holds one KV head, copied (SGLang's QKVParallelLinear).
        out = (q_out + kv_out) // tp if shape.num_kv_heads >= tp else q_out // tp + 2 * head_dim
        return 3 * hidden + out
    if buffer is LoraTarget.O_PROJ:
        return heads * head_dim // tp + hidden
    if buffer is LoraTarget.GATE_UP_PROJ:
        return 2 * hidden + 2 * shape.intermediate_size // tp
    if buffer is LoraTarget.DOWN_PROJ:
        return shape.intermediate_size // tp + hidden
    raise ValueError(f"{buffer} is not a pool buffer (normalized targets only)")
