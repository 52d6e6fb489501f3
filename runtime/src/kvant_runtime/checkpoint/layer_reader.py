"""A checkpoint directory read one module at a time, in the form transformers' modules hold.

Only the tensors under one prefix (one decoder layer, the embedding, the head) are ever read. On the
way in, stored formats become plain weights:
- compressed-tensors `pack-quantized` INT4 (`weight_packed`, `weight_scale`, `weight_shape`) is
  dequantized exactly as compressed-tensors does, so a layer computes what the INT4 model computes;
- FP8-block (`weight` e4m3 + `weight_scale_inv`, DeepSeek-V3 style) is dequantized per block;
- per-expert MoE weights (`experts.E.{gate,up,down}_proj.weight`) are stacked into the 3-D
  `experts.gate_up_proj` / `experts.down_proj` parameters transformers 5 uses, the same merge as its
  qwen2_moe checkpoint conversion (stack experts; gate rows above up rows);
- KV-cache scales (`k_scale`, `v_scale`) are left out: they configure the cache, not the layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from kvant_kernels.tensors import PackedInt4, decompress_int4, dequantize_fp8_block, from_raw
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.safetensors_io import ShardReader
from kvant_runtime.checkpoint.source import weight_map
from kvant_runtime.jsonfile import read_json_object

KV_SCALE_SUFFIXES = (".k_scale", ".v_scale")
_INT4_PARTS = ("weight_packed", "weight_scale", "weight_shape")
_FP8_SCALE = "_scale_inv"
_EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
_EXPERT = re.compile(r"^(?P<experts>.*experts)\.(?P<index>\d+)\.(?P<proj>\w+_proj)\.weight$")


class Checkpoint:
    """A safetensors checkpoint (sharded with an index, or one file) and its config.json."""

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is not a directory")
        self.directory = directory
        self.config = read_json(directory / "config.json")
        self.weight_map = weight_map(directory)
        self._readers: dict[str, ShardReader] = {}

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def has(self, name: str) -> bool:
        return name in self.weight_map

    def read(self, name: str) -> torch.Tensor:
        shard = self.weight_map.get(name)
        if shard is None:
            raise CheckpointError(f"{self.directory}: the checkpoint has no tensor {name!r}")
        if shard not in self._readers:
            path = self.directory / shard
            if not path.is_file():
                raise CheckpointError(f"{self.directory}: shard {shard} (holding {name!r}) does not exist")
            self._readers[shard] = ShardReader(path)
        try:
            reader = self._readers[shard]
            return from_raw(reader.read(name), reader.tensors[name].dtype)
        except (CheckpointError, KeyError) as err:
            raise CheckpointError(f"{self.directory / shard}: cannot read tensor {name!r}: {err}") from err

    def module_tensors(self, prefix: str, expected: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors under `prefix.`, named relative to it, as the state dict `expected` names them."""
        names = [name for name in self.weight_map if name.startswith(prefix + ".")]
        stored = {name[len(prefix) + 1 :]: name for name in names if not name.endswith(KV_SCALE_SUFFIXES)}
        tensors = self._plain_weights(prefix, stored)
        tensors = _stack_experts(tensors, expected)
        return _checked(prefix, tensors, expected, self.directory)

    def _plain_weights(self, prefix: str, stored: dict[str, str]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for relative, name in stored.items():
            module, _, part = relative.rpartition(".")
            if part in _INT4_PARTS:
                if part == "weight_packed":
                    out[f"{module}.weight"] = self._int4_weight(f"{prefix}.{module}")
                continue
            if relative.endswith(_FP8_SCALE) and relative.removesuffix(_FP8_SCALE) in stored:
                continue
            tensor = self.read(name)
            if tensor.dtype == torch.float8_e4m3fn and self.has(name + _FP8_SCALE):
                tensor = _fp8_block_weight(name, tensor, self.read(name + _FP8_SCALE))
            out[relative] = tensor
        return out

    def _int4_weight(self, module: str) -> torch.Tensor:
        missing = [part for part in _INT4_PARTS if not self.has(f"{module}.{part}")]
        if missing:
            raise CheckpointError(
                f"{self.directory}: INT4 module {module!r} lacks {', '.join(missing)}; pack-quantized "
                f"modules need all of {', '.join(_INT4_PARTS)}"
            )
        packed, scale, shape = (self.read(f"{module}.{part}") for part in _INT4_PARTS)
        # Dequantize in float32 (exact: a 4-bit code times a bf16 scale) and round once, to the layer's dtype.
        return decompress_int4(PackedInt4(packed, scale.float(), shape))


def _fp8_block_weight(name: str, weight: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    try:
        return dequantize_fp8_block(weight, scale_inv)
    except ValueError as err:
        raise CheckpointError(f"tensor {name!r}: {err}") from err


def _stack_experts(
    tensors: dict[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    per_expert: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for relative in [name for name in tensors if name not in expected]:
        if match := _EXPERT.match(relative):
            found = per_expert.setdefault(match["experts"], {})
            found.setdefault(match["proj"], {})[int(match["index"])] = tensors.pop(relative)
    for prefix, projections in per_expert.items():
        count = len(projections.get("down_proj", {}))
        if set(projections) != set(_EXPERT_PROJECTIONS) or any(
            sorted(indices) != list(range(count)) for indices in projections.values()
        ):
            raise CheckpointError(
                f"MoE experts under {prefix!r} are incomplete: every expert 0..N-1 needs "
                f"{', '.join(_EXPERT_PROJECTIONS)} weights"
            )
        if f"{prefix}.gate_up_proj" in expected:
            tensors[f"{prefix}.gate_up_proj"] = torch.stack(
                [torch.cat((projections["gate_proj"][e], projections["up_proj"][e])) for e in range(count)]
            )
        if f"{prefix}.down_proj" in expected:
            tensors[f"{prefix}.down_proj"] = torch.stack([projections["down_proj"][e] for e in range(count)])
    return tensors


def _checked(
    prefix: str, tensors: dict[str, torch.Tensor], expected: Mapping[str, torch.Tensor], directory: Path
) -> dict[str, torch.Tensor]:
    if missing := sorted(set(expected) - set(tensors)):
        raise CheckpointError(
            f"{directory}: module {prefix!r} needs tensor {prefix}.{missing[0]} "
            f"({len(missing)} missing), which the checkpoint does not hold"
        )
    if unexpected := sorted(set(tensors) - set(expected)):
        raise CheckpointError(
            f"{directory}: tensor {prefix}.{unexpected[0]} has no place in transformers' "
            f"module for {prefix!r} ({len(unexpected)} such tensors); does config.json match the weights?"
        )
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        want = expected[name]
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(
                f"{directory}: tensor {prefix}.{name} has shape {list(tensor.shape)}, "
                f"transformers' module expects {list(want.shape)}"
            )
        out[name] = tensor.to(want.dtype)
    return out


def read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, CheckpointError, "model directory")
