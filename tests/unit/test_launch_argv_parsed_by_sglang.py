"""The launcher's SGLang command lines, each parsed by SGLang's own ServerArgs parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvant_contracts.launch_spec import LaunchSpec, SpecError
from kvant_runtime.launch.argv import checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.validate import SGLangRejected, validate_argv
from tests.unit.launch_fixtures import checkpoint


def parsed(spec: LaunchSpec):
    argv = kvant_argv(spec, checkpoint_quant_method(Path(spec.modelPath))) + list(spec.engineArgs)
    return argv, validate_argv(argv, list(spec.engineArgs))


@pytest.mark.parametrize("arch", ["gqa", "mla"])
@pytest.mark.parametrize("weights", ["bf16", "int4"])
@pytest.mark.parametrize("kv", ["bf16", "fp8_e4m3"])
def test_argv_for_each_architecture_weights_and_kv_dtype(tmp_path, arch, weights, kv):
    folder = checkpoint(tmp_path, arch, weights)
    spec = LaunchSpec(
        modelPath=str(folder),
        servedModelName="m",
        weightsFormat=weights,
        kvCacheDtype=kv,
        tensorParallel=8,
        memFractionStatic=0.88,
        maxRunningRequests=128,
        maxTotalTokens=500_000,
        port=31000,
    )
    argv, args = parsed(spec)
    assert (args.model_path, args.served_model_name, args.tp_size) == (str(folder), "m", 8)
    assert args.kv_cache_dtype == kv
    assert (args.mem_fraction_static, args.max_running_requests, args.max_total_tokens) == (
        0.88,
        128,
        500_000,
    )
    assert args.enable_metrics is True
    assert (args.host, args.port) == ("0.0.0.0", 31000)
    # SGLang detects compressed-tensors INT4 from config.json; a flag would only risk disagreeing.
    assert args.quantization is None
    assert "--quantization" not in argv
    assert args.disaggregation_mode == "null"


def test_fp8_weights_from_an_unquantized_checkpoint_are_quantized_online(tmp_path):
    spec = LaunchSpec(
        modelPath=str(checkpoint(tmp_path, "gqa", "bf16")), servedModelName="m", weightsFormat="fp8"
    )
    _, args = parsed(spec)
    assert args.quantization == "fp8"


def test_weights_format_that_contradicts_the_checkpoint_is_refused(tmp_path):
    spec = LaunchSpec(
        modelPath=str(checkpoint(tmp_path, "mla", "bf16")), servedModelName="m", weightsFormat="int4"
    )
    with pytest.raises(SpecError, match=r"weightsFormat is int4.*no quantization_config"):
        parsed(spec)


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_pd_roles_set_mode_and_transfer_backend(tmp_path, role):
    folder = checkpoint(tmp_path, "mla", "int4")
    spec = LaunchSpec(
        modelPath=str(folder),
        servedModelName="m",
        weightsFormat="int4",
        kvCacheDtype="fp8_e4m3",
        pageSize=64,
        disaggregationRole=role,
        transferBackend="nixl",
    )
    _, args = parsed(spec)
    assert args.disaggregation_mode == role
    assert args.disaggregation_transfer_backend == "nixl"
    assert (args.kv_cache_dtype, args.page_size) == ("fp8_e4m3", 64)


def test_passthrough_engine_args_reach_sglang(tmp_path):
    folder = checkpoint(tmp_path, "gqa", "int4")
    engine_args = ("--chunked-prefill-size", "4096", "--context-length=32768", "--disable-radix-cache")
    spec = LaunchSpec(
        modelPath=str(folder), servedModelName="m", weightsFormat="int4", engineArgs=engine_args
    )
    argv, args = parsed(spec)
    assert argv[-3:] == list(engine_args[1:])
    assert (args.chunked_prefill_size, args.context_length, args.disable_radix_cache) == (4096, 32768, True)


@pytest.mark.parametrize(
    ("engine_args", "named"),
    [
        (["--no-such-flag", "1"], "--no-such-flag"),
        (["--chunked-prefill-size", "lots"], "--chunked-prefill-size"),
        (["--attention-backend", "warp-drive"], "--attention-backend"),
        (["--chunked"], "--chunked"),  # abbreviations are refused: a spec names flags in full
    ],
)
def test_bad_passthrough_flags_fail_with_sglangs_message_naming_the_flag(tmp_path, engine_args, named):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = LaunchSpec(
        modelPath=str(folder), servedModelName="m", weightsFormat="bf16", engineArgs=tuple(engine_args)
    )
    with pytest.raises(SGLangRejected, match="rejected the command line") as error:
        parsed(spec)
    assert named in str(error.value)


@pytest.mark.parametrize(
    ("flag", "owner"),
    [
        ("--kv-cache-dtype=bf16", "kvCacheDtype"),
        ("--tensor-parallel-size", "tensorParallel"),
        ("--port", "port"),
    ],
)
def test_engine_args_may_not_override_what_the_plan_decides(tmp_path, flag, owner):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = LaunchSpec(
        modelPath=str(folder), servedModelName="m", weightsFormat="bf16", engineArgs=(flag, "4")
    )
    with pytest.raises(SGLangRejected, match=f"engineArgs sets {flag.split('=')[0]}.*{owner}"):
        parsed(spec)
