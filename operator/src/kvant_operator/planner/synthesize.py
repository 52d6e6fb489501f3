"""The tensor inventory a checkpoint of this shape would have, for planning from config.json alone.

Names follow the Hugging Face layout of each family (the names SGLang's loaders read), so the
same target and ignore rules apply to a derived inventory as to a real one.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvant_operator.planner.architecture import Attention, ModelShape
from kvant_operator.planner.inventory import Inventory, Tensor

_SOURCE_DTYPE = {2: "BF16", 4: "F32"}


def synthesize(shape: ModelShape) -> Inventory:
    dtype = _SOURCE_DTYPE.get(shape.dtype_bytes, "BF16")
    tensors: list[Tensor] = [
        Tensor("model.embed_tokens.weight", dtype, (shape.vocab_size, shape.hidden_size))
    ]
    for layer in range(shape.num_layers):
        tensors.extend(_layer(shape, layer, dtype))
    tensors.append(Tensor("model.norm.weight", dtype, (shape.hidden_size,)))
    if not shape.tie_word_embeddings:
        tensors.append(Tensor("lm_head.weight", dtype, (shape.vocab_size, shape.hidden_size)))
    return Inventory(tensors=tuple(tensors), origin="config.json")


def _layer(shape: ModelShape, layer: int, dtype: str) -> Iterator[Tensor]:
    prefix = f"model.layers.{layer}"
    yield Tensor(f"{prefix}.input_layernorm.weight", dtype, (shape.hidden_size,))
    yield Tensor(f"{prefix}.post_attention_layernorm.weight", dtype, (shape.hidden_size,))
    attention = _mla(shape) if shape.attention is Attention.MLA else _gqa(shape)
    mlp = _dense_mlp(shape.intermediate_size, shape.hidden_size) if _is_dense(shape, layer) else _moe(shape)
    for module, dims in (*((f"self_attn.{m}", d) for m, d in attention), *((f"mlp.{m}", d) for m, d in mlp)):
        yield from _weight(shape, f"{prefix}.{module}", dims, dtype)


def _is_dense(shape: ModelShape, layer: int) -> bool:
    return shape.moe is None or layer in shape.moe.dense_layers


def _gqa(shape: ModelShape) -> list[tuple[str, tuple[int, ...]]]:
    q, kv, hidden = (
        shape.num_attention_heads * shape.head_dim,
        shape.num_kv_heads * shape.head_dim,
        shape.hidden_size,
    )
    modules: list[tuple[str, tuple[int, ...]]] = [
        ("q_proj", (q, hidden)),
        ("k_proj", (kv, hidden)),
        ("v_proj", (kv, hidden)),
        ("o_proj", (hidden, q)),
    ]
    if shape.attention_bias:
        modules += [("q_proj.bias", (q,)), ("k_proj.bias", (kv,)), ("v_proj.bias", (kv,))]
    if shape.qk_norm:
        modules += [("q_norm", (shape.head_dim,)), ("k_norm", (shape.head_dim,))]
    return modules


def _mla(shape: ModelShape) -> list[tuple[str, tuple[int, ...]]]:
    heads, hidden = shape.num_attention_heads, shape.hidden_size
    q_out = heads * (shape.qk_nope_head_dim + shape.qk_rope_head_dim)
    if shape.q_lora_rank:
        query = [
            ("q_a_proj", (shape.q_lora_rank, hidden)),
            ("q_a_layernorm", (shape.q_lora_rank,)),
            ("q_b_proj", (q_out, shape.q_lora_rank)),
        ]
    else:
        query = [("q_proj", (q_out, hidden))]
    return [
        *query,
        ("kv_a_proj_with_mqa", (shape.kv_lora_rank + shape.qk_rope_head_dim, hidden)),
        ("kv_a_layernorm", (shape.kv_lora_rank,)),
        ("kv_b_proj", (heads * (shape.qk_nope_head_dim + shape.v_head_dim), shape.kv_lora_rank)),
        ("o_proj", (hidden, heads * shape.v_head_dim)),
    ]


def _dense_mlp(intermediate: int, hidden: int, prefix: str = "") -> list[tuple[str, tuple[int, ...]]]:
    return [
        (f"{prefix}gate_proj", (intermediate, hidden)),
        (f"{prefix}up_proj", (intermediate, hidden)),
        (f"{prefix}down_proj", (hidden, intermediate)),
    ]


def _moe(shape: ModelShape) -> list[tuple[str, tuple[int, ...]]]:
    assert shape.moe is not None
    moe, hidden = shape.moe, shape.hidden_size
    modules: list[tuple[str, tuple[int, ...]]] = [("gate", (moe.num_experts, hidden))]
    for expert in range(moe.num_experts):
        modules += _dense_mlp(moe.intermediate_size, hidden, f"experts.{expert}.")
    if moe.shared_intermediate_size:
        modules += _dense_mlp(moe.shared_intermediate_size, hidden, "shared_experts.")
    return modules


def _weight(shape: ModelShape, module: str, dims: tuple[int, ...], dtype: str) -> Iterator[Tensor]:
    """A module's tensors; Linear weights of a block-FP8 source carry e4m3 data and an f32 scale grid."""
    if module.endswith(".bias"):
        yield Tensor(module, dtype, dims)
        return
    is_linear = len(dims) == 2 and not module.endswith("mlp.gate")
    if shape.fp8_block is None or not is_linear:
        yield Tensor(f"{module}.weight", dtype, dims)
        return
    block_out, block_in = shape.fp8_block
    yield Tensor(f"{module}.weight", "F8_E4M3", dims)
    yield Tensor(f"{module}.weight_scale_inv", "F32", (-(-dims[0] // block_out), -(-dims[1] // block_in)))
