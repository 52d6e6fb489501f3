"""The SGLang command line for one serving pod, built from a launch spec.

`--quantization` is passed only where SGLang's auto-detection from the
checkpoint's `config.json` would be wrong: SGLang reads
`quantization_config.quant_method` and picks the kernels itself (Marlin for
compressed-tensors INT4, block FP8 for FP8 checkpoints). The one case it cannot
detect is FP8 weights from a checkpoint that carries no quantization config,
which SGLang quantizes online with `--quantization fp8`. A checkpoint whose
config contradicts `weightsFormat` is refused before any GPU time is spent.

`--quantization-param-path` points SGLang at per-layer KV-cache scales in a
JSON file (`kvant calibrate` writes `kvant-kv-scales.json` for models whose
loader reads one), but only for a checkpoint whose config declares no
`kv_cache_scheme`. With a scheme, SGLang 0.5.23 registers `k_scale`/`v_scale`
parameters on every RadixAttention and loads the checkpoint's scale tensors into
them; its `load_kv_cache_scales` then assigns a float to those parameters, which
torch refuses (TypeError), so the engine would not start. Kvant's calibrated
artifacts declare a scheme and carry the tensors, which SGLang loads instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvant_contracts.engine_scheduler import engine_flags
from kvant_contracts.launch_spec import LaunchSpec, SpecError
from kvant_contracts.serving_pod import BOOTSTRAP_PORT
from kvant_contracts.weight_formats import weight_format
from kvant_runtime.launch.cpu_engine import cpu_flags, cpu_refusal

# Why an engine on the CPU cannot have an adapter pool (docs/design/adapters-research.md, section 6).
LORA_ON_CPU = (
    "lora: SGLang 0.5.23's LoRA layers pin host memory, which its CPU backend does not have, so an "
    "engine with an adapter pool cannot start on device cpu; serve adapters on device cuda"
)
# Per-layer KV-cache scales for SGLang's --quantization-param-path, as `kvant calibrate` writes them.
KV_SCALES_JSON = "kvant-kv-scales.json"


def checkpoint_quant_method(model_path: Path) -> str | None:
    """`quantization_config.quant_method` of the checkpoint, None when it is not quantized."""
    config_path = model_path / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise SpecError(f"modelPath {model_path} has no config.json; is it a checkpoint folder?") from None
    except (OSError, json.JSONDecodeError) as error:
        raise SpecError(f"cannot read {config_path}: {error}") from None
    quant = config.get("quantization_config")
    return None if quant is None else str(quant.get("quant_method"))


def quantization_param_flag(model_path: Path) -> list[str]:
    """`--quantization-param-path` for the checkpoint's JSON KV-cache scales, where SGLang can apply
    them (see the module docstring); [] otherwise."""
    scales = model_path / KV_SCALES_JSON
    if not scales.is_file():
        return []
    try:
        quant = json.loads((model_path / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, json.JSONDecodeError, AttributeError) as error:
        raise SpecError(f"cannot read {model_path / 'config.json'}: {error}") from None
    return [] if quant.get("kv_cache_scheme") else ["--quantization-param-path", str(scales)]


def quantization_flag(weights_format: str, quant_method: str | None) -> list[str]:
    """SGLang's --quantization for this checkpoint, after checking its quant_method fits the format."""
    fmt = weight_format(weights_format)
    if quant_method not in fmt.quant_methods:
        found = f"quant_method {quant_method!r}" if quant_method else "no quantization_config"
        raise SpecError(
            f"weightsFormat is {weights_format}, but the checkpoint's config.json has {found}; "
            f"{weights_format} needs quant_method in {list(fmt.quant_methods)}"
        )
    if quant_method is None and fmt.online_quantization:
        return ["--quantization", fmt.online_quantization]
    return []


def kvant_argv(spec: LaunchSpec, quant_method: str | None, amx: bool = False) -> list[str]:
    """The flags Kvant derives from the plan, before the passthrough engineArgs. `amx`: whether the
    node's CPU has Intel AMX, which picks the CPU backend's attention kernels (cpu_engine.py)."""
    if spec.device == "cpu":
        refusal = cpu_refusal(spec.weightsFormat, spec.kvCacheDtype, amx)
        if refusal is not None:
            raise SpecError(refusal)
        if spec.lora is not None:
            raise SpecError(LORA_ON_CPU)
    argv = ["--model-path", spec.modelPath, "--served-model-name", spec.servedModelName]
    argv += ["--tp-size", str(spec.tensorParallel), "--kv-cache-dtype", spec.kvCacheDtype]
    argv += quantization_flag(spec.weightsFormat, quant_method)
    argv += quantization_param_flag(Path(spec.modelPath))
    optional = {
        "--mem-fraction-static": spec.memFractionStatic,
        "--max-running-requests": spec.maxRunningRequests,
        "--max-total-tokens": spec.maxTotalTokens,
        "--page-size": spec.pageSize,
    }
    for flag, value in optional.items():
        if value is not None:
            argv += [flag, str(value)]
    if spec.disaggregationRole is not None:
        argv += ["--disaggregation-mode", spec.disaggregationRole]
        argv += ["--disaggregation-transfer-backend", spec.transferBackend]
    if spec.disaggregationRole == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    argv += engine_flags(spec.scheduler)
    if spec.lora is not None:
        argv += spec.lora.flags()
    if spec.device == "cpu":
        argv += cpu_flags(amx, list(spec.engineArgs))
    return [*argv, "--enable-metrics", "--host", spec.host, "--port", str(spec.port)]


# Which launch-spec field owns each flag Kvant sets, for errors about engineArgs that set one too.
FLAG_OWNERS = {
    "model_path": "modelPath",
    "served_model_name": "servedModelName",
    "tp_size": "tensorParallel",
    "kv_cache_dtype": "kvCacheDtype",
    "quantization": "weightsFormat",
    "quantization_param_path": "spec.kvCache.scales",
    "mem_fraction_static": "memFractionStatic",
    "max_running_requests": "maxRunningRequests",
    "max_total_tokens": "maxTotalTokens",
    "page_size": "pageSize",
    "disaggregation_mode": "disaggregationRole",
    "disaggregation_transfer_backend": "transferBackend",
    "disaggregation_bootstrap_port": "disaggregationRole (the gate relays the prefill's bootstrap port)",
    "enable_metrics": "(always on)",
    "device": "spec.serving.device",
    "host": "host",
    "port": "port",
    "admin_api_key": "spec.access.adminTokenSecret",
    "enable_lora": "spec.serving.lora",
    "max_lora_rank": "spec.serving.lora.maxRank",
    "lora_target_modules": "spec.serving.lora.targetModules",
    "max_loras_per_batch": "spec.serving.lora.slots",
    "max_loaded_loras": "spec.serving.lora.maxLoaded",
    "lora_paths": "spec.serving.lora (adapters are loaded live, not at start)",
    "api_key": "spec.access.apiKeysSecret (the gate checks client keys)",
}
REDACTED = "REDACTED"


def with_admin_key(argv: list[str], token: str | None) -> list[str]:
    return [*argv, "--admin-api-key", token] if token else argv


def redacted(argv: list[str]) -> list[str]:
    """`argv` as it may be logged: the admin key's value hidden."""
    return [REDACTED if i and argv[i - 1] == "--admin-api-key" else a for i, a in enumerate(argv)]
