"""A checkpoint as the planner sees it: its shape from config.json and its tensor inventory."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner.architecture import ConfigError, ModelShape, load_config, parse_shape
from kvant_operator.planner.inventory import Inventory, read_checkpoint
from kvant_operator.planner.synthesize import synthesize
from kvant_operator.planner.weights import source_format


@dataclass(frozen=True)
class Checkpoint:
    shape: ModelShape
    inventory: Inventory
    where: str

    @cached_property
    def source_format(self) -> WeightFormat:
        return source_format(self.inventory)


def load_checkpoint(path: Path) -> Checkpoint:
    """Reads a checkpoint folder (config.json + safetensors headers) or a lone config.json.

    Without safetensors files the inventory is derived from the config, which is exact for the
    families the planner knows but cannot describe an already-quantized compressed-tensors model.
    """
    config_path = path / "config.json" if path.is_dir() else path
    config = load_config(config_path)
    shape = parse_shape(config, str(config_path))
    inventory = read_checkpoint(path) if path.is_dir() else None
    if inventory is None:
        quant_method = (config.get("quantization_config") or {}).get("quant_method")
        if quant_method not in (None, "fp8"):
            raise ConfigError(
                f"{config_path}: the model is already quantized ({quant_method}); pass the checkpoint "
                "folder so the planner reads its tensor inventory from the safetensors headers"
            )
        inventory = synthesize(shape)
    return Checkpoint(shape=shape, inventory=inventory, where=str(path))
