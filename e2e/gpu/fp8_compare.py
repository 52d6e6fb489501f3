"""Kvant's FP8 KV emulation on the CPU against float8 on the GPU: value by value, then through a model.

`kvant eval --device cpu` quantizes K/V with `kvant_kernels.fp8.quantize_fp8` on CPU tensors
(PyTorch's conversion routine). On a GPU the same code runs on CUDA tensors, and the Triton kernel in
`e2e.gpu.triton_fp8` rounds with the GPU's conversion instruction. Three comparisons:

- codes: the e4m3 byte each path gives for chosen values (every e4m3 value, every midpoint between
  neighbours and one float32 ulp either side, the subnormal range, saturation, random magnitudes) at
  unit and calibrated scales, and for every float32 bit pattern (the sweep);
- decoding: the float32 value of each of the 256 codes on both devices and in `kvant_kernels.bits`;
- the model: one layer-streamed float32 forward per device with unquantized, calibrated-scale and
  unit-scale FP8 KV in lockstep, so what differs is the device's arithmetic and its FP8 rounding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kvant_kernels.bits import E4M3_VALUES
from kvant_kernels.fp8 import FP8_E4M3, quantize_fp8
from kvant_kernels.kv_scales import fake_quantize_kv
from kvant_runtime.checkpoint.kv_layout import KVLayout, kv_layout
from kvant_runtime.checkpoint.kv_tap import KVTap
from kvant_runtime.checkpoint.layer_reader import Checkpoint, read_json
from kvant_runtime.checkpoint.layer_stream import LayerStream
from kvant_runtime.evaluate.agreement import Agreement

CPU = torch.device("cpu")
E4M3 = "fp8_e4m3"  # the GPU's float8 compared here is e4m3, the format Kvant serves by default
SWEEP_CHUNK = 1 << 26  # float32 bit patterns per step of the sweep: 2^32 in 64 steps
FULL_SWEEP = range(64)
QUICK_SWEEP = (48,)  # bit patterns 0x40000000..0x43FFFFFF, floats in [2, 512): rounding and saturation
UNQUANTIZED = "unquantized"
CALIBRATED = "fp8-calibrated"
UNIT = "fp8-unit"
CALIBRATED_HARDWARE = "fp8-calibrated-hardware"
_NAN_CODE = 0x7F
_EXAMPLES = 5
Logits = dict[str, list[torch.Tensor]]


def hardware_fp8_unavailable(device: torch.device) -> str | None:
    """Why the Triton kernel cannot run on `device` (it is tried once on a few values); None when it can."""
    if device.type != "cuda":
        return f"device {device.type} is not a GPU"
    try:
        from e2e.gpu import triton_fp8  # noqa: PLC0415 - Triton only where a GPU is

        triton_fp8.to_e4m3(torch.zeros(16, device=device))
    except Exception as err:  # Triton missing, no C compiler for its launcher, an unsupported GPU...
        return f"the Triton FP8 kernel does not run here: {type(err).__name__}: {err}"
    return None


def probe_values() -> torch.Tensor:
    """float32 values that exercise every rounding decision of e4m3, both signs."""
    finite = torch.from_numpy(E4M3_VALUES[~np.isnan(E4M3_VALUES)].copy())
    magnitudes = torch.unique(finite.abs())  # sorted: 0, the subnormals, ..., 448
    midpoints = (magnitudes[:-1] + magnitudes[1:]) / 2  # ties: exact in float32
    beside = torch.cat(
        (torch.nextafter(midpoints, torch.tensor(math.inf)), torch.nextafter(midpoints, torch.tensor(0.0)))
    )
    beyond = torch.tensor([448.5, 463.99, 464.0, 464.01, 479.99, 480.0, 512.0, 1e4, 3.0e38, math.inf])
    subnormal = torch.linspace(0.0, 2.0**-6, 4097)
    generator = torch.Generator().manual_seed(0)
    spread = torch.exp2(torch.empty(1 << 20).uniform_(-12.0, 10.0, generator=generator))
    positive = torch.cat((magnitudes, midpoints, beside, beyond, subnormal, spread)).float()
    return torch.cat((positive, -positive))


def compare_codes(device: torch.device, scales: dict[str, float]) -> dict[str, Any]:
    """Kvant's e4m3 bytes for the probe values on the CPU against `device` (and the GPU instruction)."""
    values = probe_values()
    unavailable = hardware_fp8_unavailable(device)
    hardware = unavailable is None
    per_scale: dict[str, Any] = {}
    examples: list[dict[str, Any]] = []
    for label, scale in scales.items():
        x = values * scale
        on_cpu = _codes(x, scale)
        on_device = _codes(x.to(device), scale).cpu()
        dequantized = fake_quantize_kv(x, scale, E4M3) - fake_quantize_kv(x.to(device), scale, E4M3).cpu()
        entry: dict[str, Any] = {
            "scale": scale,
            "torchMismatches": _mismatches(x, scale, on_cpu, on_device, "torch", examples),
            "maxAbsDequantizedDifference": float(dequantized.abs().max()),
        }
        if hardware:
            entry["hardwareMismatches"] = _mismatches(
                x, scale, on_cpu, _hardware_codes(x.to(device), scale).cpu(), "hardware", examples
            )
        per_scale[label] = entry
    return {
        "values": values.numel(),
        "device": device.type,
        "hardware": hardware,
        "hardwareUnavailable": unavailable,
        "scales": per_scale,
        "torchMismatches": sum(entry["torchMismatches"] for entry in per_scale.values()),
        "hardwareMismatches": (
            sum(entry["hardwareMismatches"] for entry in per_scale.values()) if hardware else None
        ),
        "examples": examples,
    }


def compare_decoding(device: torch.device) -> dict[str, Any]:
    """float32 values of all 256 e4m3 bytes: the CPU and `device` against `kvant_kernels.bits`."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    table = torch.from_numpy(E4M3_VALUES.copy())
    on_cpu = codes.view(FP8_E4M3).float()
    on_device = codes.to(device).view(FP8_E4M3).float().cpu()
    return {
        "codes": 256,
        "cpuVsTable": _value_mismatches(on_cpu, table),
        "deviceVsTable": _value_mismatches(on_device, table),
    }


def sweep_float32(device: torch.device, chunks: Iterable[int]) -> dict[str, Any]:
    """Every float32 bit pattern in `chunks` through `quantize_fp8` (scale 1) on the CPU and `device`.

    NaN inputs give NaN on both (compared as NaN, whatever the sign bit); the GPU instruction is
    compared on the other inputs only, since its clamp does not keep NaN.
    """
    unavailable = hardware_fp8_unavailable(device)
    hardware = unavailable is None
    checked = torch_mismatches = hardware_mismatches = 0
    examples: list[dict[str, Any]] = []
    chunk_list = list(chunks)
    for chunk in chunk_list:
        start = chunk * SWEEP_CHUNK - 2**31
        x = (torch.arange(SWEEP_CHUNK, dtype=torch.int32) + start).view(torch.float32)
        x_device = (torch.arange(SWEEP_CHUNK, dtype=torch.int32, device=device) + start).view(torch.float32)
        on_cpu = _canonical(_codes(x, 1.0))
        on_device = _canonical(_codes(x_device, 1.0)).cpu()
        torch_mismatches += _mismatches(x, 1.0, on_cpu, on_device, "torch", examples)
        if hardware:
            finite = ~x.isnan()
            on_hardware = _hardware_codes(x_device, 1.0).cpu()
            hardware_mismatches += _mismatches(
                x[finite], 1.0, on_cpu[finite], on_hardware[finite], "hardware", examples
            )
        checked += SWEEP_CHUNK
        del x, x_device, on_cpu, on_device
    return {
        "bitPatterns": checked,
        "chunks": len(chunk_list),
        "allFloat32": set(chunk_list) == set(FULL_SWEEP),
        "device": device.type,
        "hardwareUnavailable": unavailable,
        "torchMismatches": torch_mismatches,
        "hardwareMismatches": hardware_mismatches if hardware else None,
        "examples": examples,
    }


def compare_through_model(
    artifact: Path, samples: list[torch.Tensor], device: torch.device
) -> dict[str, Any]:
    """The artifact in float32 on the CPU and on `device`, each with unquantized and FP8 KV variants.

    Per variant: KL divergence and top-1 agreement against the same device's unquantized run, and
    the largest logit difference between the devices (for the unquantized variant that is the
    devices' arithmetic alone, the baseline the FP8 variants are read against).
    """
    layout = kv_layout(read_json(artifact / "config.json"))
    scales = kv_scales(artifact, layout)
    unavailable = hardware_fp8_unavailable(device)
    hardware = unavailable is None
    seconds: dict[str, float] = {}
    logits: dict[str, Logits] = {}
    for side, where, with_hardware in (("cpu", CPU, False), ("device", device, hardware)):
        started = time.monotonic()
        logits[side] = lockstep_logits(artifact, samples, where, _taps(layout, scales, with_hardware))
        seconds[side] = round(time.monotonic() - started, 2)
    variants: dict[str, Any] = {}
    for name in (CALIBRATED, UNIT, CALIBRATED_HARDWARE):
        entry: dict[str, Any] = {}
        for side in ("cpu", "device"):
            if name in logits[side]:
                entry[side] = _agreement(logits[side][UNQUANTIZED], logits[side][name], samples)
        if "cpu" in entry and "device" in entry:
            entry["meanKLDifference"] = abs(
                entry["cpu"]["meanKLDivergence"] - entry["device"]["meanKLDivergence"]
            )
        if entry:
            variants[name] = entry
    differences = {
        name: _max_abs_difference(logits["cpu"][name], logits["device"][name])
        for name in (UNQUANTIZED, CALIBRATED, UNIT)
    }
    if CALIBRATED_HARDWARE in logits["device"]:
        # Kvant's CPU emulation against the GPU instruction, through the whole model.
        differences["fp8-calibrated: cpu emulation vs device hardware"] = _max_abs_difference(
            logits["cpu"][CALIBRATED], logits["device"][CALIBRATED_HARDWARE]
        )
        variants[CALIBRATED_HARDWARE]["cpu"] = variants[CALIBRATED]["cpu"]  # what the instruction is held to
        variants[CALIBRATED_HARDWARE]["meanKLDifference"] = abs(
            variants[CALIBRATED]["cpu"]["meanKLDivergence"]
            - variants[CALIBRATED_HARDWARE]["device"]["meanKLDivergence"]
        )
    return {
        "device": device.type,
        "computeDtype": "float32",
        "hardware": hardware,
        "hardwareUnavailable": unavailable,
        "samples": len(samples),
        "tokens": sum(int(sample.numel()) for sample in samples),
        "variants": variants,
        "maxAbsLogitDifference": differences,
        "secondsPerDevice": seconds,
    }


def kv_scales(artifact: Path, layout: KVLayout) -> dict[int, tuple[float, float]]:
    """The calibrated k_scale/v_scale of every layer, as the artifact stores them."""
    checkpoint = Checkpoint(artifact)
    try:
        scales: dict[int, tuple[float, float]] = {}
        for layer in range(layout.layers):
            k_name, v_name = layout.scale_names(layer)
            scales[layer] = (_scalar(checkpoint, k_name), _scalar(checkpoint, v_name))
        return scales
    finally:
        checkpoint.close()


def lockstep_logits(
    artifact: Path, samples: list[torch.Tensor], device: torch.device, taps: dict[str, KVTap | None]
) -> Logits:
    """Logits per sample for each KV variant: one float32 layer-streamed pass, every layer loaded once."""
    stream = LayerStream(artifact, device, dtype=torch.float32)
    try:
        first = stream.embed(samples)
        hidden = dict.fromkeys(taps, first)
        for index in range(len(stream.layers)):
            with stream.layer(index) as module:
                for name, tap in taps.items():
                    hidden[name] = stream.run_layer(module, hidden[name], tap)
        return {name: [out.cpu() for out in stream.logits(states)] for name, states in hidden.items()}
    finally:
        stream.close()


def _taps(
    layout: KVLayout, scales: dict[int, tuple[float, float]], hardware: bool
) -> dict[str, KVTap | None]:
    unit = dict.fromkeys(range(layout.layers), (1.0, 1.0))
    taps: dict[str, KVTap | None] = {
        UNQUANTIZED: None,
        CALIBRATED: KVTap(layout.kind, scales),
        UNIT: KVTap(layout.kind, unit),
    }
    if hardware:
        from e2e.gpu.triton_fp8 import HardwareFp8Tap  # noqa: PLC0415 - Triton only where a GPU is

        taps[CALIBRATED_HARDWARE] = HardwareFp8Tap(layout.kind, scales)
    return taps


def _agreement(
    reference: list[torch.Tensor], candidate: list[torch.Tensor], samples: list[torch.Tensor]
) -> dict[str, Any]:
    agreement = Agreement()
    for ref, cand, tokens in zip(reference, candidate, samples, strict=True):
        agreement.add(ref, cand, tokens)
    return agreement.summary()


def _max_abs_difference(first: list[torch.Tensor], second: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(first, second, strict=True))


def _scalar(checkpoint: Checkpoint, name: str) -> float:
    return float(checkpoint.read(name).float().reshape(()))


def _codes(values: torch.Tensor, scale: float) -> torch.Tensor:
    """Kvant's e4m3 bytes for `values`, computed on their device."""
    q, _ = quantize_fp8(values, torch.tensor(scale, dtype=torch.float32, device=values.device))
    return q.view(torch.uint8)


def _hardware_codes(values: torch.Tensor, scale: float) -> torch.Tensor:
    """The same bytes, rounded by the GPU's conversion instruction (the division stays in PyTorch)."""
    from e2e.gpu.triton_fp8 import to_e4m3  # noqa: PLC0415 - Triton only where a GPU is

    scale_tensor = torch.tensor(scale, dtype=torch.float32, device=values.device)
    return to_e4m3(values.float() / scale_tensor).view(torch.uint8)


def _canonical(codes: torch.Tensor) -> torch.Tensor:
    """e4m3 bytes with every NaN (S.1111.111) written 0x7F, so NaNs of either sign compare equal."""
    return torch.where((codes & 0x7F) == _NAN_CODE, torch.full_like(codes, _NAN_CODE), codes)


def _mismatches(
    x: torch.Tensor,
    scale: float,
    expected: torch.Tensor,
    got: torch.Tensor,
    path: str,
    examples: list[dict[str, Any]],
) -> int:
    """How many bytes differ; the first few differences of each path go to `examples`."""
    differ = expected != got
    count = int(differ.sum())
    room = _EXAMPLES - sum(1 for example in examples if example["path"] == path)
    for index in differ.nonzero().flatten()[: max(0, room)].tolist():
        examples.append(
            {
                "path": path,
                "input": repr(float(x[index])),  # a string: JSON has no inf
                "scale": scale,
                "cpu": f"0x{int(expected[index]):02x}",
                path: f"0x{int(got[index]):02x}",
            }
        )
    return count


def _value_mismatches(first: torch.Tensor, second: torch.Tensor) -> int:
    both_nan = first.isnan() & second.isnan()
    return int(((first != second) & ~both_nan).sum())
