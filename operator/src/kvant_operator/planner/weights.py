"""Weight bytes after conversion, for the whole checkpoint and per GPU.

INT4 is sized from the converter's own layout (`kvant_contracts.int4_artifact`): the same rule picks
the quantized tensors and the same function names what is written for each source tensor, so the
plan's checkpoint bytes are the artifact's tensor bytes. The FP8-block and BF16 conversions, which
only the planner models (what-ifs), use the same target rule:
  FP8 block: one e4m3 byte per element and an f32 scale per 128x128 block;
  BF16: FP8-block Linear weights dequantized to two bytes per element, their scales dropped.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from kvant_contracts.int4_artifact import (
    FP8_SCALE_SUFFIX,
    TargetRule,
    TensorSpec,
    int4_outputs,
    is_fp8_block_scale,
    is_linear_weight,
)
from kvant_contracts.weights_recipe import DEFAULT_GROUP_SIZE
from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.planner.inventory import Inventory, Tensor

FP8_BLOCK = 128
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})
# Kept whole on every TP rank by SGLang: MLA's down-projections and MoE router gates.
_REPLICATED = re.compile(r"\.(q_a_proj|kv_a_proj_with_mqa|mlp\.gate)\.")


@dataclass(frozen=True)
class Conversion:
    """What to produce: the served format and, for quantized formats, which Linear layers."""

    format: WeightFormat
    group_size: int = DEFAULT_GROUP_SIZE
    targets: QuantTargets = QuantTargets.ALL_LINEAR  # the dense default (weights_recipe decides)
    ignore: tuple[str, ...] = ()

    @functools.cached_property
    def rule(self) -> TargetRule:  # asked once per tensor of a checkpoint: built once
        return TargetRule(self.targets.value, self.ignore)


@dataclass(frozen=True)
class WeightSizes:
    checkpoint_bytes: int
    bytes_per_gpu: int
    converted_tensors: int
    indivisible_tensors: int  # targets whose input dimension is not a multiple of the group size


def source_format(inventory: Inventory) -> WeightFormat:
    """The format the checkpoint is in now, judged by its Linear weights."""
    linear = [t for t in inventory.tensors if is_linear_weight(t.name, t.shape)]
    if any(t.name.endswith("weight_packed") for t in inventory.tensors):
        return WeightFormat.INT4
    if linear and sum(t.dtype in FP8_DTYPES for t in linear) * 2 > len(linear):
        return WeightFormat.FP8
    return WeightFormat.BF16


def size_weights(inventory: Inventory, conversion: Conversion, tp: int, num_layers: int) -> WeightSizes:
    converted = [t for t in inventory.tensors if _converts(t, conversion)]
    dropped = _consumed_scales(inventory, conversion, {t.name for t in converted})
    total = per_gpu = 0.0
    for tensor in inventory.tensors:
        if tensor.name in dropped:
            continue
        nbytes = _written_bytes(tensor, conversion)
        total += nbytes
        if tensor.layer is None or tensor.layer < num_layers:  # layers past num_layers are MTP heads
            per_gpu += nbytes if _is_replicated(tensor) else nbytes / tp
    indivisible = sum(
        1 for t in converted if conversion.format is WeightFormat.INT4 and t.shape[1] % conversion.group_size
    )
    return WeightSizes(int(total), math.ceil(per_gpu), len(converted), indivisible)


def _converts(tensor: Tensor, conversion: Conversion) -> bool:
    """Whether the conversion changes this weight's numbers (quantizes it, or dequantizes it)."""
    if conversion.format is WeightFormat.BF16:
        return tensor.dtype in FP8_DTYPES and is_linear_weight(tensor.name, tensor.shape)
    if conversion.format is WeightFormat.FP8 and tensor.dtype in FP8_DTYPES:
        return False
    return conversion.rule.quantizes(tensor.name, tensor.shape)


def _consumed_scales(inventory: Inventory, conversion: Conversion, converted: set[str]) -> set[str]:
    """FP8-block scales that are not written: all of them for INT4 (every FP8 weight is quantized or
    dequantized), those of the dequantized weights for BF16, none for FP8."""
    fp8_weights = frozenset(t.name for t in inventory.tensors if t.dtype in FP8_DTYPES)
    if conversion.format is WeightFormat.INT4:
        return {t.name for t in inventory.tensors if is_fp8_block_scale(t.name, fp8_weights)}
    if conversion.format is WeightFormat.BF16:
        return {name + FP8_SCALE_SUFFIX for name in converted}
    return set()


def _written_bytes(tensor: Tensor, conversion: Conversion) -> int:
    if conversion.format is WeightFormat.INT4:
        spec = TensorSpec(tensor.name, tensor.dtype, tensor.shape)
        outputs = int4_outputs(spec, conversion.rule, conversion.group_size)
        return sum(Tensor(t.name, t.dtype, t.shape).nbytes for t in outputs)
    if not _converts(tensor, conversion):
        return tensor.nbytes
    out_features, in_features = tensor.shape
    if conversion.format is WeightFormat.FP8:
        return out_features * in_features + -(-out_features // FP8_BLOCK) * -(-in_features // FP8_BLOCK) * 4
    return out_features * in_features * 2


def _is_replicated(tensor: Tensor) -> bool:
    return len(tensor.shape) < 2 or _REPLICATED.search(tensor.name) is not None
