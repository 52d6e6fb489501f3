"""Tensor inventories come from safetensors headers alone, written here by the safetensors library."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kvant_contracts import safetensors_header
from kvant_contracts.safetensors_header import HeaderError
from kvant_operator.planner.inventory import InventoryError, read_checkpoint, read_header

TENSORS: dict[str, np.ndarray] = {
    "model.layers.0.mlp.up_proj.weight": np.zeros((64, 32), dtype=np.float16),
    "model.layers.0.input_layernorm.weight": np.zeros((32,), dtype=np.float32),
    "model.layers.0.mlp.experts.0.down_proj.weight_packed": np.zeros((32, 8), dtype=np.int32),
    "model.layers.0.mlp.experts.0.down_proj.weight_shape": np.zeros((2,), dtype=np.int64),
    "model.layers.0.attn.k_scale": np.zeros((), dtype=np.float32),
}


def test_header_lists_every_tensor_with_dtype_shape_and_size(tmp_path: Path):
    path = tmp_path / "model.safetensors"
    save_file(TENSORS, str(path), metadata={"format": "pt"})
    found = {t.name: t for t in read_header(path)}
    assert found.keys() == TENSORS.keys()
    for name, array in TENSORS.items():
        assert found[name].shape == array.shape
        assert found[name].nbytes == array.nbytes
    assert found["model.layers.0.mlp.up_proj.weight"].dtype == "F16"
    assert found["model.layers.0.mlp.up_proj.weight"].layer == 0


def test_tensor_data_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "model.safetensors"
    save_file(TENSORS, str(path))
    (header_length,) = np.frombuffer(path.read_bytes()[:8], dtype="<u8")
    read = []
    real_open = Path.open

    def counting_open(self: Path, *args, **kwargs):
        file = real_open(self, *args, **kwargs)
        real_read = file.read

        def counted(size: int = -1) -> bytes:
            data = real_read(size)
            read.append(len(data))
            return data

        file.read = counted
        return file

    monkeypatch.setattr(Path, "open", counting_open)
    assert len(read_header(path)) == len(TENSORS)
    assert sum(read) == 8 + int(header_length)  # the header, and not one byte of tensor data


def test_sharded_checkpoint_is_read_through_its_index(tmp_path: Path):
    shards = {"model-00001-of-00002.safetensors": dict(list(TENSORS.items())[:2])}
    shards["model-00002-of-00002.safetensors"] = dict(list(TENSORS.items())[2:])
    weight_map = {}
    for file, tensors in shards.items():
        save_file(tensors, str(tmp_path / file))
        weight_map.update(dict.fromkeys(tensors, file))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    save_file({"stray": np.zeros(4, dtype=np.float16)}, str(tmp_path / "not-in-index.safetensors"))
    inventory = read_checkpoint(tmp_path)
    assert inventory is not None and inventory.origin == "safetensors"
    assert {t.name for t in inventory.tensors} == TENSORS.keys()
    assert inventory.nbytes == sum(a.nbytes for a in TENSORS.values())


def test_folder_without_safetensors_has_no_inventory(tmp_path: Path):
    assert read_checkpoint(tmp_path) is None


def test_missing_shard_is_named(tmp_path: Path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "shard-1.safetensors"}})
    )
    with pytest.raises(InventoryError, match=r"shard-1\.safetensors"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "content", [b"\x01\x02", (2**40).to_bytes(8, "little") + b"{}", (5).to_bytes(8, "little") + b"nope!"]
)
def test_corrupt_file_is_rejected_naming_it(tmp_path: Path, content: bytes):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    with pytest.raises(InventoryError, match=r"broken\.safetensors"):
        read_header(path)


def test_a_truncated_shard_is_left_to_the_converter(tmp_path: Path):
    """The plan needs shapes only; the converter refuses the truncated shard, and its failure is retried."""
    path = tmp_path / "model.safetensors"
    save_file(TENSORS, str(path))
    (header_length,) = np.frombuffer(path.read_bytes()[:8], dtype="<u8")
    os.truncate(path, 8 + int(header_length))
    assert len(read_header(path)) == len(TENSORS)
    with pytest.raises(HeaderError, match="truncated or corrupt shard"):
        safetensors_header.read_header(path)


def test_overlapping_tensors_are_refused_naming_both(tmp_path: Path):
    header = {
        "a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [4, 12]},
    }
    raw = json.dumps(header).encode()
    path = tmp_path / "overlap.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\x00" * 12)
    with pytest.raises(HeaderError, match="tensors 'a' and 'b' overlap"):
        safetensors_header.read_header(path)
    with pytest.raises(InventoryError, match="overlap"):
        read_header(path)  # the planner refuses it too
