"""`device: cpu`: the launcher's command line for SGLang's CPU backend, parsed by SGLang 0.5.23's own
parser, and what a CPU without AMX cannot serve refused by name before weights load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvant_contracts.launch_spec import LaunchSpec, SpecError, parse_spec_json
from kvant_runtime.launch.argv import checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.cpu_engine import ENGINE_ENV, has_amx
from kvant_runtime.launch.validate import validate_argv
from tests.unit.launch_fixtures import checkpoint

EPYC_FLAGS = "flags\t\t: fpu vme sse2 avx2 avx512f avx512_bf16 avx512_vnni"
SAPPHIRE_RAPIDS_FLAGS = "flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"


def cpu_spec(folder: Path, **fields: object) -> LaunchSpec:
    values: dict[str, object] = {
        "modelPath": str(folder),
        "servedModelName": "m",
        "weightsFormat": "bf16",
        "kvCacheDtype": "auto",
        "maxTotalTokens": 2048,
        "maxRunningRequests": 8,
        "device": "cpu",
        **fields,
    }
    return LaunchSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def cpu_engine_env(monkeypatch):
    for name, value in ENGINE_ENV.items():
        monkeypatch.setenv(name, value)


def test_amx_is_read_from_the_cpu_flags():
    assert not has_amx(f"processor\t: 0\n{EPYC_FLAGS}\n")
    assert has_amx(f"processor\t: 0\n{SAPPHIRE_RAPIDS_FLAGS}\n")
    assert not has_amx("")


@pytest.mark.parametrize(("amx", "backend"), [(False, "torch_native"), (True, "intel_amx")])
def test_cpu_argv_is_accepted_by_sglangs_parser(tmp_path, cpu_engine_env, amx, backend):
    spec = cpu_spec(checkpoint(tmp_path, "gqa", "bf16"))
    argv = kvant_argv(spec, checkpoint_quant_method(Path(spec.modelPath)), amx)
    args = validate_argv(argv, [])
    assert args.device == "cpu"
    assert args.attention_backend == backend
    assert args.sleep_on_idle is True
    # The KV size is the plan's, never SGLang's default (which sizes KV from the host's RAM).
    assert args.max_total_tokens == 2048
    assert "--mem-fraction-static" not in argv


def test_an_attention_backend_in_engine_args_is_the_users_choice(tmp_path, cpu_engine_env):
    spec = cpu_spec(checkpoint(tmp_path, "gqa", "bf16"), engineArgs=("--attention-backend", "torch_native"))
    argv = kvant_argv(spec, None, amx=True) + list(spec.engineArgs)
    assert argv.count("--attention-backend") == 1
    assert validate_argv(argv, list(spec.engineArgs)).attention_backend == "torch_native"


def test_fp8_kv_cache_without_amx_is_refused_naming_the_field(tmp_path):
    spec = cpu_spec(checkpoint(tmp_path, "gqa", "bf16"), kvCacheDtype="fp8_e4m3")
    with pytest.raises(SpecError, match=r"spec.kvCache.dtype fp8_e4m3 needs a CPU with Intel AMX"):
        kvant_argv(spec, None, amx=False)
    assert "--kv-cache-dtype" in kvant_argv(spec, None, amx=True)  # an AMX node serves it


def test_an_e5m2_kv_cache_is_refused_on_any_cpu(tmp_path):
    # SGLang 0.5.23 raises for fp8_e5m2 on CPU whatever the CPU; the launcher says so before loading.
    spec = cpu_spec(checkpoint(tmp_path, "gqa", "bf16"), kvCacheDtype="fp8_e5m2")
    for amx in (False, True):
        with pytest.raises(SpecError, match=r"spec.kvCache.dtype fp8_e5m2: SGLang 0.5.23 has no e5m2"):
            kvant_argv(spec, None, amx=amx)


def test_int4_weights_are_refused_on_any_cpu(tmp_path):
    spec = cpu_spec(checkpoint(tmp_path, "gqa", "int4"), weightsFormat="int4")
    for amx in (False, True):
        with pytest.raises(SpecError, match=r"spec.weights.format int4 .* only CUDA kernels"):
            kvant_argv(spec, "compressed-tensors", amx)


def test_device_in_the_spec_json_only_when_not_cuda():
    """The launch spec is in the engine's pod template: a GPU model's text must not change when an
    operator upgrade adds the field, or every engine would restart."""
    gpu = LaunchSpec(modelPath="/m", servedModelName="m", weightsFormat="bf16")
    assert "device" not in json.loads(gpu.to_json())
    assert parse_spec_json(gpu.to_json()) == gpu
    cpu = LaunchSpec(modelPath="/m", servedModelName="m", weightsFormat="bf16", device="cpu")
    assert json.loads(cpu.to_json())["device"] == "cpu"
    assert parse_spec_json(cpu.to_json()) == cpu
    with pytest.raises(SpecError, match="device must be one of cuda, cpu"):
        LaunchSpec(modelPath="/m", servedModelName="m", weightsFormat="bf16", device="tpu")


def check(spec: LaunchSpec, cpuinfo_has_amx: bool = False) -> tuple[int, dict]:
    """`kvant launch --check` as the engine-check init container runs it, on this machine's CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ENGINE_ENV}
    command = [sys.executable, "-m", "kvant_cli.main", "launch", "--check", "--spec-json", spec.to_json()]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_engine_check_reports_the_cpu_backend_and_refuses_fp8_kv_here(tmp_path):
    """status.engine shows the backend chosen for the node's CPU; these machines have no AMX."""
    folder = checkpoint(tmp_path, "gqa", "bf16")
    if has_amx(Path("/proc/cpuinfo").read_text()):
        pytest.skip("this CPU has AMX: the refusal below is for CPUs without it")
    code, line = check(cpu_spec(folder))
    assert code == 0, line
    assert (line["device"], line["attentionBackend"], line["amx"]) == ("cpu", "torch_native", False)
    code, line = check(cpu_spec(folder, kvCacheDtype="fp8_e4m3"))
    assert code == 2
    assert line["supported"] is True
    assert "needs a CPU with Intel AMX" in line["problem"]
