"""The launcher passes `--quantization-param-path` for a model folder's `kvant-kv-scales.json` only
where SGLang 0.5.23 can apply it: with a compressed-tensors `kv_cache_scheme`, SGLang's
`load_kv_cache_scales` (run here from its source) fails on the scale parameters the scheme creates,
and the checkpoint's scale tensors are what loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch import nn

from kvant_contracts.launch_spec import LaunchSpec
from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_runtime.launch.argv import KV_SCALES_JSON, checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.validate import SGLangRejected, validate_argv
from tests.unit.launch_fixtures import checkpoint
from tests.unit.sglang_source import model_with_kv_scales, quant_param_loader, sglang_method

SCALES = {
    "model_type": "llama",
    "kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {"0": 0.5, "1": 0.25}}},
}


def folder_with_scales(root: Path, kv_cache_scheme: bool) -> Path:
    folder = checkpoint(root, "gqa", "int4")
    config = json.loads((folder / "config.json").read_text())
    if kv_cache_scheme:
        config["quantization_config"]["kv_cache_scheme"] = dict(KV_CACHE_SCHEME)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / KV_SCALES_JSON).write_text(json.dumps(SCALES))
    return folder


def argv_for(folder: Path, *engine_args: str) -> tuple[list[str], object]:
    spec = LaunchSpec(
        modelPath=str(folder),
        servedModelName="m",
        weightsFormat="int4",
        kvCacheDtype="fp8_e4m3",
        engineArgs=engine_args,
    )
    argv = kvant_argv(spec, checkpoint_quant_method(folder)) + list(engine_args)
    return argv, validate_argv(argv, list(engine_args))


def test_the_json_reaches_sglang_when_the_checkpoint_has_no_kv_cache_scheme(tmp_path):
    folder = folder_with_scales(tmp_path, kv_cache_scheme=False)
    argv, args = argv_for(folder)
    assert argv.count("--quantization-param-path") == 1
    assert args.quantization_param_path == str(folder / KV_SCALES_JSON)  # type: ignore[attr-defined]


def test_a_checkpoint_with_a_kv_cache_scheme_gets_no_json_flag(tmp_path):
    argv, args = argv_for(folder_with_scales(tmp_path, kv_cache_scheme=True))
    assert "--quantization-param-path" not in argv
    assert args.quantization_param_path is None  # type: ignore[attr-defined]


def test_no_json_no_flag(tmp_path):
    argv, _ = argv_for(checkpoint(tmp_path, "gqa", "int4"))
    assert "--quantization-param-path" not in argv


def test_engine_args_may_not_set_the_json(tmp_path):
    with pytest.raises(SGLangRejected, match=r"--quantization-param-path.*spec\.kvCache\.scales"):
        argv_for(checkpoint(tmp_path, "gqa", "int4"), "--quantization-param-path", "/elsewhere.json")


@pytest.mark.parametrize("kv_cache_scheme", [True, False])
def test_sglangs_json_loader_fails_on_the_parameters_a_kv_cache_scheme_creates(tmp_path, kv_cache_scheme):
    path = tmp_path / KV_SCALES_JSON
    path.write_text(json.dumps(SCALES))
    load_json = sglang_method(
        "models/llama.py",
        "LlamaModel",
        "load_kv_cache_scales",
        kv_cache_scales_loader=quant_param_loader(),
        nn=nn,
    )
    model = model_with_kv_scales(2, "self_attn.attn", with_scales=kv_cache_scheme).model
    model._kv_cache_parallel_layout = (0, 1)
    model.config = type("LlamaConfig", (), {"model_type": "llama"})()
    model.config.num_hidden_layers = 2
    attention = [layer.self_attn.attn for layer in model.layers]
    if kv_cache_scheme:
        with pytest.raises(TypeError, match="cannot assign 'float' as parameter 'k_scale'"):
            load_json(model, str(path))
    else:
        load_json(model, str(path))
        assert [a.k_scale for a in attention] == [a.v_scale for a in attention] == [0.5, 0.25]
