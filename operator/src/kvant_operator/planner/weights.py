"""Weight bytes after conversion, for the whole checkpoint and per GPU.

Which tensors a conversion touches is decided here once: Linear weights of the decoder layers
(2-D `*.weight` under `layers.N`), minus router gates, narrowed by `targets` and `ignore`. Every
other tensor keeps its source representation. Sizes include the scales each format adds:
  INT4 pack-quantized: int32 words holding 8 nibbles, a bf16 scale per group, an int64[2] shape;
  FP8 block: one e4m3 byte per element and an f32 scale per 128x128 block.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.planner.inventory import Inventory, Tensor

FP8_BLOCK = 128
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})
_ROUTER_GATE = re.compile(r"\.mlp\.gate$")
_EXPERT = re.compile(r"\.mlp\.experts\.\d+\.")
# Kept whole on every TP rank by SGLang: MLA's down-projections and MoE router gates.
_REPLICATED = re.compile(r"\.(q_a_proj|kv_a_proj_with_mqa|mlp\.gate)\.")
_SCALE_SUFFIX = ".weight_scale_inv"


@dataclass(frozen=True)
class Conversion:
    """What to produce: the served format and, for quantized formats, which Linear layers."""

    format: WeightFormat
    group_size: int = 128
    targets: QuantTargets = QuantTargets.ALL_LINEAR
    ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class WeightSizes:
    checkpoint_bytes: int
    bytes_per_gpu: int
    converted_tensors: int
    indivisible_tensors: int  # targets whose input dimension is not a multiple of the group size


def module_of(tensor: Tensor) -> str:
    return tensor.name.rsplit(".", 1)[0]


def is_linear_weight(tensor: Tensor) -> bool:
    return (
        tensor.name.endswith(".weight")
        and len(tensor.shape) == 2
        and tensor.layer is not None
        and not _ROUTER_GATE.search(module_of(tensor))
    )


def is_ignored(module: str, ignore: tuple[str, ...]) -> bool:
    """compressed-tensors ignore syntax: an exact module name, or "re:<regex>" matched from the start."""
    return any(module == p or (p.startswith("re:") and re.match(p[3:], module)) for p in ignore)


def source_format(inventory: Inventory) -> WeightFormat:
    """The format the checkpoint is in now, judged by its Linear weights."""
    linear = [t for t in inventory.tensors if is_linear_weight(t)]
    if any(t.name.endswith("weight_packed") for t in inventory.tensors):
        return WeightFormat.INT4
    if linear and sum(t.dtype in FP8_DTYPES for t in linear) * 2 > len(linear):
        return WeightFormat.FP8
    return WeightFormat.BF16


def size_weights(inventory: Inventory, conversion: Conversion, tp: int, num_layers: int) -> WeightSizes:
    converted = [t for t in inventory.tensors if _converts(t, conversion)]
    converted_names = {t.name for t in converted}
    # A converted FP8 weight no longer needs its block scales.
    dropped_scales = {f"{module_of(t)}{_SCALE_SUFFIX}" for t in converted}
    total = per_gpu = 0.0
    for tensor in inventory.tensors:
        if tensor.name in dropped_scales:
            continue
        nbytes = _converted_bytes(tensor, conversion) if tensor.name in converted_names else tensor.nbytes
        total += nbytes
        if tensor.layer is None or tensor.layer < num_layers:  # layers past num_layers are MTP heads
            per_gpu += nbytes if _is_replicated(tensor) else nbytes / tp
    indivisible = sum(
        1 for t in converted if conversion.format is WeightFormat.INT4 and t.shape[1] % conversion.group_size
    )
    return WeightSizes(int(total), math.ceil(per_gpu), len(converted), indivisible)


def _converts(tensor: Tensor, conversion: Conversion) -> bool:
    if not is_linear_weight(tensor):
        return False
    if conversion.format is WeightFormat.BF16:
        return tensor.dtype in FP8_DTYPES  # dequantize; bf16 sources stay as they are
    if conversion.format is WeightFormat.FP8 and tensor.dtype in FP8_DTYPES:
        return False
    module = module_of(tensor)
    in_targets = conversion.targets is QuantTargets.ALL_LINEAR or _EXPERT.search(module) is not None
    return in_targets and not is_ignored(module, conversion.ignore)


def _converted_bytes(tensor: Tensor, conversion: Conversion) -> int:
    out_features, in_features = tensor.shape
    if conversion.format is WeightFormat.INT4:
        packed = out_features * -(-in_features // 8) * 4
        scales = out_features * -(-in_features // conversion.group_size) * 2
        return packed + scales + 2 * 8
    if conversion.format is WeightFormat.FP8:
        return out_features * in_features + -(-out_features // FP8_BLOCK) * -(-in_features // FP8_BLOCK) * 4
    return out_features * in_features * 2


def _is_replicated(tensor: Tensor) -> bool:
    return len(tensor.shape) < 2 or _REPLICATED.search(tensor.name) is not None
