"""Calibration: run the samples through the artifact layer by layer, derive per-layer FP8 KV scales for
the cache format that will be served (e4m3 or e5m2: the format's range sets the scale), and publish
them in the artifact on every path SGLang's loader for the architecture reads: the tensors under the
names it takes and, where the model reads one, a `--quantization-param-path` JSON (`KVLayout.paths`;
the result's `kvScalePaths` lists them)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvant_contracts.job_lines import ArtifactResult
from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE
from kvant_kernels.fp8 import KV_FP8_FORMATS
from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_kernels.kv_scales import SAFETY_MARGIN, LayerAbsmax, kv_cache_scale
from kvant_runtime.calibrate import scales_publish as artifact
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_layout import KVLayout, kv_layout
from kvant_runtime.checkpoint.kv_tap import KVTap
from kvant_runtime.checkpoint.layer_reader import read_json
from kvant_runtime.checkpoint.layer_stream import LayerStream, resolve_device
from kvant_runtime.checkpoint.token_windows import TokenWindows, token_windows
from kvant_runtime.job_output import KV_SCALE_PATHS_FIELD

CALIBRATION_DATA = "kvant_runtime.calibrate"


@dataclass(frozen=True)
class Options:
    samples: int = 128
    sequence_length: int = 2048
    data: Path | None = None
    device: str = "cpu"
    tensor_parallel: int = 1  # SGLang's TP size: the JSON's scales are checked against it, rank by rank
    kv_dtype: str = DEFAULT_KV_DTYPE  # the served --kv-cache-dtype, whose range the scales map onto


def measure_kv_absmax(
    directory: Path,
    windows: TokenWindows,
    layout: KVLayout,
    device: torch.device,
    on_layer: Callable[[int, LayerAbsmax], None] | None = None,
) -> LayerAbsmax:
    """Per-layer absmax of what the KV cache stores, from a layer-streamed forward pass."""
    stream = LayerStream(directory, device)
    tap = KVTap(layout.kind, widths=layout.widths)

    def after_layer(index: int) -> None:
        if on_layer is not None:
            on_layer(index, tap.absmax)

    try:
        stream.run(windows.samples, tap, after_layer)
    finally:
        stream.close()
    if (seen := tap.absmax.layers()) != list(range(layout.layers)):
        raise CheckpointError(f"{directory}: the KV cache saw layers {seen}, expected 0..{layout.layers - 1}")
    return tap.absmax


def scales_for(layout: KVLayout, absmax: LayerAbsmax, kv_dtype: str) -> dict[str, float]:
    """Every scale tensor, by name, under each tensor path the loader takes."""
    scales: dict[str, float] = {}
    for path in layout.tensor_paths():
        for layer in range(layout.layers):
            k_name, v_name = layout.names(path, layer)
            scales[k_name] = kv_cache_scale(absmax.k(layer), kv_dtype)
            scales[v_name] = kv_cache_scale(absmax.v(layer), kv_dtype)
    return scales


def layer_scales(layout: KVLayout, scales: dict[str, float]) -> list[float]:
    """One scale per layer for the JSON path, which SGLang applies to K and V alike: the larger one,
    so neither saturates."""
    return [max(scales[name] for name in layout.scale_names(layer)) for layer in range(layout.layers)]


def calibrate(directory: Path, options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    """Calibrates and publishes; returns the result (the JSON `kvant calibrate` prints)."""
    started = time.monotonic()
    device = resolve_device(options.device)
    if options.tensor_parallel < 1:
        raise CheckpointError(f"--tp {options.tensor_parallel}: SGLang's tensor-parallel size is at least 1")
    if options.kv_dtype not in KV_FP8_FORMATS:
        raise CheckpointError(
            f"--kv-dtype {options.kv_dtype!r}: valid values are {', '.join(KV_FP8_FORMATS)}"
        )
    config = read_json(directory / artifact.CONFIG_FILE)
    artifact.check_calibratable(config, directory)
    layout = kv_layout(config, options.kv_dtype)
    windows = token_windows(
        directory,
        int(config.get("vocab_size", 0)),
        options.data,
        CALIBRATION_DATA,
        samples=options.samples,
        sequence_length=options.sequence_length,
    )
    unpublished = artifact.unpublish(directory)  # only once the input is known to be usable
    say(
        f"calibrating {layout.architecture} ({layout.kind.upper()} cache, {layout.layers} layers, SGLang "
        f"scale paths: {', '.join(layout.paths)}) on {len(windows.samples)} samples, "
        f"{windows.tokens} tokens from {windows.source}, device {device}"
    )

    def report(layer: int, absmax: LayerAbsmax) -> None:
        kv = f"K absmax {absmax.k(layer):.4g}, V absmax {absmax.v(layer):.4g}"
        say(f"layer {layer + 1}/{layout.layers}: {kv}")

    absmax = measure_kv_absmax(directory, windows, layout, device, report)
    scales = scales_for(layout, absmax, options.kv_dtype)
    calibration = _calibration_record(options, windows, layout)
    quant_params = None
    if "json" in layout.paths:
        model_type = config.get("model_type")
        quant_params = artifact.quant_param_document(
            model_type if isinstance(model_type, str) else None,
            layer_scales(layout, scales),
            options.tensor_parallel,
        )
    manifest = artifact.publish(unpublished, scales, calibration, quant_params)
    say(f"published {directory} ({manifest['digest']}, was {unpublished.previous['digest']})")
    return {
        "artifact": str(directory),
        **ArtifactResult(manifest["digest"], manifest["bytes"], manifest.get("sourceBytes", 0)).fields(),
        "previousDigest": unpublished.previous["digest"],
        **calibration,
        "layers": [_layer_result(layout, absmax, scales, layer) for layer in range(layout.layers)],
        "seconds": round(time.monotonic() - started, 2),
    }


def _calibration_record(options: Options, windows: TokenWindows, layout: KVLayout) -> dict[str, Any]:
    """What the manifest records about how the scales were made."""
    digest = hashlib.sha256()
    for sample in windows.samples:
        digest.update(sample.numpy().astype("<i8").tobytes())
    return {
        "scales": "calibrate",
        "kvCacheDtype": options.kv_dtype,
        "kvCacheScheme": dict(KV_CACHE_SCHEME),
        "architecture": layout.architecture,
        "cache": layout.kind,
        "samples": len(windows.samples),
        "sequenceLength": options.sequence_length,
        "tokens": windows.tokens,
        "data": windows.source,
        "tokenizer": windows.tokenizer,
        "tokensSha256": digest.hexdigest(),
        "safetyMargin": SAFETY_MARGIN,
        KV_SCALE_PATHS_FIELD: list(layout.paths),
        **({"tensorParallel": options.tensor_parallel} if "json" in layout.paths else {}),
    }


def _layer_result(
    layout: KVLayout, absmax: LayerAbsmax, scales: dict[str, float], layer: int
) -> dict[str, Any]:
    k_name, v_name = layout.scale_names(layer)
    return {
        "layer": layer,
        "kAbsmax": absmax.k(layer),
        "vAbsmax": absmax.v(layer),
        "kScale": scales[k_name],
        "vScale": scales[v_name],
    }
