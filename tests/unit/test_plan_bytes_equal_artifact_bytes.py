"""The capacity plan and the artifact agree: for each source dtype, ignore form and target set, the
planner's predicted checkpoint bytes are exactly the bytes of the tensors the converter writes.

Both sides take which tensors are quantized, and what is written for each, from one definition
(`kvant_contracts.int4_artifact`); this test measures the artifact from its own safetensors headers.
"""

from __future__ import annotations

import inspect
import json
import struct
from pathlib import Path

import pytest

from kvant_contracts import int4_artifact
from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.planner import weights
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.weights import Conversion, size_weights
from kvant_runtime.convert import recipe, shard
from kvant_runtime.convert.recipe import Recipe
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert

CASES = [
    ("llama", "bf16", "all-linear", ()),
    ("llama", "fp16", "all-linear", ("down_proj",)),  # exact form, matching a module's dotted tail
    ("llama", "fp32", "all-linear", ("model.layers.0.self_attn.q_proj", "re:.*layers\\.1\\.mlp\\.")),
    ("deepseek_v3", "bf16", "experts", ()),
    ("deepseek_v3", "fp8-block", "all-linear", ("re:.*kv_a_proj_with_mqa$",)),
]


def artifact_tensor_bytes(directory: Path) -> int:
    """The sum of every tensor's byte range, from each shard's safetensors header."""
    total = 0
    for path in sorted(directory.glob("*.safetensors")):
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        total += sum(
            end - begin
            for name, t in header.items()
            if name != "__metadata__"
            for begin, end in [t["data_offsets"]]
        )
    return total


@pytest.mark.parametrize(("arch", "dtype", "targets", "ignore"), CASES, ids=str)
def test_planned_checkpoint_bytes_are_the_artifacts(tmp_path, arch, dtype, targets, ignore):
    source = tiny_checkpoint(arch, dtype)
    manifest = convert(source, tmp_path / "out", group_size=32, targets=targets, ignore=ignore)
    artifact = tmp_path / "out"
    conversion = Conversion(WeightFormat.INT4, 32, QuantTargets(targets), ignore)
    inventory = load_checkpoint(source).inventory
    planned = size_weights(inventory, conversion, tp=1, num_layers=2)
    assert planned.checkpoint_bytes == artifact_tensor_bytes(artifact), manifest
    index = json.loads((artifact / "model.safetensors.index.json").read_text())["weight_map"]
    assert planned.converted_tensors == sum(1 for name in index if name.endswith(".weight_packed"))


def test_planner_and_converter_use_the_one_rule():
    # Both sides build the shared TargetRule from their own settings, and nothing else decides.
    assert Conversion(WeightFormat.INT4).rule == Recipe().rule == int4_artifact.TargetRule()
    assert not hasattr(recipe, "should_quantize") and not hasattr(weights, "is_ignored")
    assert inspect.getsource(shard).count("int4_outputs(") == 1
