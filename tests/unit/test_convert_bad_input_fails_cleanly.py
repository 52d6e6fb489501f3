"""Bad input fails with one line naming the file and tensor, exit code != 0, and nothing published."""

import json

import pytest
import torch
from safetensors.torch import save_file

from kvant_cli.main import main
from kvant_contracts.artifact_manifest import MANIFEST_NAME
from tests.tiny_checkpoints import copy_checkpoint, tiny_checkpoint
from tests.unit.convert_harness import kvant


def assert_nothing_published(output):
    assert not (output / MANIFEST_NAME).exists()
    assert not list(output.glob("*.safetensors")) and not (output / "config.json").exists()


def test_truncated_shard_fails_cleanly_as_a_real_process(tmp_path):
    source = copy_checkpoint(tiny_checkpoint("llama"), tmp_path / "src")
    shard = source / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

    result = kvant("convert", source, tmp_path / "out")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert str(shard) in error and "truncated" in error and "tensor 'model." in error
    assert_nothing_published(tmp_path / "out")


def test_debug_shows_the_traceback(tmp_path):
    source = copy_checkpoint(tiny_checkpoint("llama"), tmp_path / "src")
    (source / "model-00001-of-00002.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(Exception, match="not a safetensors file"):
        main(["convert", str(source), str(tmp_path / "out"), "--debug"])


def write_checkpoint(directory, tensors, config=None, index=None):
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config or {"model_type": "llama"}))
    save_file(tensors, directory / "model-00001-of-00001.safetensors")
    weight_map = index or dict.fromkeys(tensors, "model-00001-of-00001.safetensors")
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return directory


def run_cli(capsys, *args):
    code = main(["convert", *map(str, args)])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_indivisible_shape_names_tensor_and_group_size(tmp_path, capsys):
    source = write_checkpoint(tmp_path / "src", {"model.layers.0.mlp.down_proj.weight": torch.zeros(8, 96)})
    code, error = run_cli(capsys, source, tmp_path / "out", "--group-size", "64")
    assert code != 0
    assert "'model.layers.0.mlp.down_proj.weight'" in error and "not divisible by group size 64" in error
    assert_nothing_published(tmp_path / "out")


def test_missing_index_entry_is_named(tmp_path, capsys):
    tensors = {"a.weight": torch.zeros(8, 128), "b.weight": torch.zeros(8, 128)}
    source = write_checkpoint(
        tmp_path / "src", tensors, index={"a.weight": "model-00001-of-00001.safetensors"}
    )
    code, error = run_cli(capsys, source, tmp_path / "out")
    assert code != 0 and "'b.weight'" in error and "missing from the index" in error


def test_unsupported_dtype_is_named(tmp_path, capsys):
    source = write_checkpoint(tmp_path / "src", {"x.weight": torch.zeros(8, 128, dtype=torch.float8_e4m3fn)})
    code, error = run_cli(capsys, source, tmp_path / "out")
    assert code != 0 and "'x.weight'" in error and "F8_E4M3" in error
    assert_nothing_published(tmp_path / "out")


def test_compressed_tensors_source_is_an_unsupported_format_naming_the_field(tmp_path, capsys):
    config = {"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}}
    source = write_checkpoint(tmp_path / "src", {"x.weight": torch.zeros(8, 128)}, config=config)
    code, error = run_cli(capsys, source, tmp_path / "out")
    assert code != 0
    assert "unsupported source format" in error and "quantization_config.quant_method" in error
