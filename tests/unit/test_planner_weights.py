"""Weight bytes after conversion: which tensors are converted, and what each format adds in scales."""

from __future__ import annotations

import pytest

from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.planner.inventory import Inventory, Tensor
from kvant_operator.planner.weights import Conversion, size_weights, source_format

HIDDEN, INTER, VOCAB = 1024, 4096, 2048


def dense_model(layers: int = 2) -> Inventory:
    """Embedding, norms and lm_head are 10% of the bytes; the decoder Linear weights the other 90%."""
    tensors = []
    for i in range(layers):
        tensors += [
            Tensor(f"model.layers.{i}.mlp.up_proj.weight", "BF16", (INTER, HIDDEN)),
            Tensor(f"model.layers.{i}.mlp.down_proj.weight", "BF16", (HIDDEN, INTER)),
            Tensor(f"model.layers.{i}.input_layernorm.weight", "BF16", (HIDDEN,)),
        ]
    linear = sum(t.nbytes for t in tensors if len(t.shape) == 2)
    rest = linear // 9 - sum(t.nbytes for t in tensors if len(t.shape) == 1)
    tensors.append(Tensor("model.embed_tokens.weight", "BF16", (rest // 2 // HIDDEN, HIDDEN)))
    return Inventory(tuple(tensors), "test")


def test_int4_group_128_shrinks_linear_bytes_to_a_quarter_plus_scales():
    model = dense_model()
    linear = [t for t in model.tensors if ".layers." in t.name and len(t.shape) == 2]
    assert sum(t.nbytes for t in linear) == pytest.approx(0.9 * model.nbytes, rel=1e-3)
    sizes = size_weights(model, Conversion(WeightFormat.INT4, group_size=128), tp=1, num_layers=2)
    # Per bf16 element (2 bytes): half a byte of packed nibbles plus a 2-byte bf16 scale per 128 elements,
    # and 16 bytes of weight_shape per tensor.
    expected = 0.1 * model.nbytes + 0.9 * model.nbytes * (0.5 + 2 / 128) / 2 + 16 * len(linear)
    assert sizes.checkpoint_bytes == pytest.approx(expected, rel=1e-3)
    assert sizes.checkpoint_bytes / model.nbytes == pytest.approx(0.1 + 0.9 * 0.2578125, rel=1e-3)
    assert sizes.converted_tensors == len(linear)


def test_smaller_groups_carry_more_scales():
    model = dense_model()
    g32 = size_weights(model, Conversion(WeightFormat.INT4, group_size=32), 1, 2).checkpoint_bytes
    g128 = size_weights(model, Conversion(WeightFormat.INT4, group_size=128), 1, 2).checkpoint_bytes
    linear_elements = 2 * 2 * INTER * HIDDEN
    assert g32 - g128 == linear_elements // 32 * 2 - linear_elements // 128 * 2


def test_fp8_block_adds_one_f32_scale_per_128_block_with_partial_edges():
    model = Inventory(
        (Tensor("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "BF16", (576, 7168)),), "test"
    )
    sizes = size_weights(model, Conversion(WeightFormat.FP8), tp=8, num_layers=1)
    assert sizes.checkpoint_bytes == 576 * 7168 + 5 * 56 * 4  # ceil(576/128) = 5 block rows
    assert sizes.bytes_per_gpu == sizes.checkpoint_bytes, "MLA's kv_a_proj is replicated on every rank"


def moe_fp8_layer() -> Inventory:
    names = [
        "mlp.experts.0.up_proj",
        "mlp.experts.1.up_proj",
        "mlp.shared_experts.up_proj",
        "self_attn.o_proj",
    ]
    tensors = [Tensor("model.layers.0.mlp.gate.weight", "BF16", (2, 256))]
    for name in names:
        tensors.append(Tensor(f"model.layers.0.{name}.weight", "F8_E4M3", (256, 256)))
        tensors.append(Tensor(f"model.layers.0.{name}.weight_scale_inv", "F32", (2, 2)))
    return Inventory(tuple(tensors), "test")


def test_experts_target_quantizes_only_routed_experts_and_dequantizes_the_other_fp8_weights():
    model = moe_fp8_layer()
    assert source_format(model) is WeightFormat.FP8
    sizes = size_weights(model, Conversion(WeightFormat.INT4, targets=QuantTargets.EXPERTS), 1, 1)
    int4 = 256 * 256 // 2 + 256 * 2 * 2 + 16
    # As the converter writes them: the bf16 router gate as is; the shared expert and o_proj, which stay
    # unquantized, dequantized to BF16; no FP8 scale survives.
    router_gate, dequantized = 2 * 256 * 2, 2 * (256 * 256 * 2)
    assert sizes.converted_tensors == 2
    assert sizes.checkpoint_bytes == 2 * int4 + router_gate + dequantized


def test_ignore_and_router_gates_stay_in_source_precision():
    model = moe_fp8_layer()
    conversion = Conversion(
        WeightFormat.INT4, targets=QuantTargets.ALL_LINEAR, ignore=("re:.*shared_experts.*",)
    )
    converted = size_weights(model, conversion, 1, 1).converted_tensors
    assert converted == 3  # two experts and o_proj; never mlp.gate, and the ignored shared expert stays


def test_bf16_from_fp8_source_dequantizes():
    model = moe_fp8_layer()
    sizes = size_weights(model, Conversion(WeightFormat.BF16), 1, 1)
    assert sizes.checkpoint_bytes == 2 * 256 * 2 + 4 * 256 * 256 * 2


def test_mtp_layers_count_in_the_checkpoint_but_not_on_the_gpu():
    model = Inventory(
        (
            Tensor("model.layers.0.mlp.up_proj.weight", "BF16", (128, 128)),
            Tensor("model.layers.1.mlp.up_proj.weight", "BF16", (128, 128)),
        ),
        "test",
    )
    sizes = size_weights(model, Conversion(WeightFormat.BF16), tp=2, num_layers=1)
    assert (sizes.checkpoint_bytes, sizes.bytes_per_gpu) == (2 * 128 * 128 * 2, 128 * 128)
