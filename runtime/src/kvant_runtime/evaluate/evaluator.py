"""The accuracy gate: a candidate artifact against its reference, both layer-streamed in lockstep.

Both models run the same built-in evaluation text (held out from calibration) one decoder layer at
a time: layer N of the reference, then layer N of the candidate, so memory stays at about one layer
of each plus two sets of activations. With `--kv-dtype fp8_e4m3` (or `fp8_e5m2`) the candidate's
attention reads K/V quantize-dequantized through that format with the candidate's own k_scale/v_scale
(or 1.0 with `--unit-scales`), which is what SGLang's FP8 cache of that format gives back.

The gate passes when the mean KL divergence is at most `maxKLDivergence` (the QuantizedModel's
`spec.evaluation.maxKLDivergence`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvant_contracts.artifact_manifest import MANIFEST_NAME, ManifestError, verify_artifact
from kvant_contracts.job_lines import EvalVerdict
from kvant_contracts.kv_dtypes import FP8_KV_DTYPE_NAMES, KV_DTYPE_NAMES, KvCacheDtype
from kvant_kernels.fp8 import KV_FP8_FORMATS
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_layout import kv_layout
from kvant_runtime.checkpoint.kv_tap import KVTap
from kvant_runtime.checkpoint.layer_reader import Checkpoint, read_json
from kvant_runtime.checkpoint.layer_stream import LayerStream, resolve_device
from kvant_runtime.checkpoint.token_windows import token_windows
from kvant_runtime.evaluate.agreement import Agreement

EVALUATION_DATA = "kvant_runtime.evaluate"
GATED_METRIC = "meanKLDivergence"


@dataclass(frozen=True)
class Options:
    kv_dtype: str = KvCacheDtype.AUTO.value
    unit_scales: bool = False
    max_kl_divergence: float | None = None
    samples: int = 16
    sequence_length: int = 512
    data: Path | None = None
    device: str = "cpu"


def evaluate(
    reference: Path, candidate: Path, options: Options, say: Callable[[str], None]
) -> dict[str, Any]:
    """Runs both models and returns the result (the JSON `kvant eval` prints), gate decision included."""
    started = time.monotonic()
    _check_options(options)
    device = resolve_device(options.device)
    digest = _candidate_digest(candidate)
    config = read_json(reference / "config.json")
    windows = token_windows(
        reference,
        int(config.get("vocab_size", 0)),
        options.data,
        EVALUATION_DATA,
        samples=options.samples,
        sequence_length=options.sequence_length,
    )
    tap, scales_kind = _candidate_kv(candidate, options)
    say(
        f"comparing {candidate} with {reference} on {len(windows.samples)} samples, {windows.tokens} tokens "
        f"from {windows.source}; candidate KV cache {options.kv_dtype}"
        + (f" ({scales_kind} scales)" if scales_kind else "")
    )
    agreement = run_lockstep(reference, candidate, windows.samples, tap, device=device, say=say)
    metrics = agreement.summary()
    failure = gate_failure(metrics, options.max_kl_divergence)
    verdict = EvalVerdict(metrics["meanKLDivergence"], metrics["top1Agreement"], failure is None, failure)
    return {
        "reference": str(reference),
        "candidate": str(candidate),
        "candidateDigest": digest,
        "kvCacheDtype": options.kv_dtype,
        "kvScales": scales_kind,
        "samples": len(windows.samples),
        "tokens": windows.tokens,
        "data": windows.source,
        **metrics,
        "maxKLDivergence": options.max_kl_divergence,
        "gatedMetric": GATED_METRIC,
        **verdict.fields(),
        "seconds": round(time.monotonic() - started, 2),
    }


def gate_failure(metrics: dict[str, Any], max_kl_divergence: float | None) -> str | None:
    """The reason the gate fails, naming the metric and the threshold; None when it passes."""
    if max_kl_divergence is None:
        return None
    value = metrics[GATED_METRIC]
    if value <= max_kl_divergence:
        return None
    return f"{GATED_METRIC} {value:.6g} exceeds maxKLDivergence {max_kl_divergence:g}"


def _check_options(options: Options) -> None:
    if options.kv_dtype not in KV_DTYPE_NAMES:
        raise CheckpointError(
            f"--kv-dtype {options.kv_dtype!r}: valid values are {', '.join(KV_DTYPE_NAMES)}"
        )
    if options.unit_scales and options.kv_dtype not in KV_FP8_FORMATS:
        raise CheckpointError(
            f"--unit-scales applies to an FP8 KV cache; add --kv-dtype {' or '.join(FP8_KV_DTYPE_NAMES)}"
        )
    if options.max_kl_divergence is not None and options.max_kl_divergence < 0:
        raise CheckpointError(f"--max-kl-divergence {options.max_kl_divergence}: must be 0 or more")


def _candidate_digest(candidate: Path) -> str | None:
    """The candidate's artifact digest, after checking its files against the manifest (sizes)."""
    if not (candidate / MANIFEST_NAME).is_file():
        return None
    try:
        return verify_artifact(candidate, None).digest
    except ManifestError as err:
        raise CheckpointError(str(err)) from err


def _candidate_kv(candidate: Path, options: Options) -> tuple[KVTap | None, str | None]:
    if options.kv_dtype not in KV_FP8_FORMATS:
        return None, None
    layout = kv_layout(read_json(candidate / "config.json"), options.kv_dtype)
    if options.unit_scales:
        unit = dict.fromkeys(range(layout.layers), (1.0, 1.0))
        return KVTap(layout.kind, unit, kv_dtype=options.kv_dtype), "unit"
    checkpoint = Checkpoint(candidate)
    try:
        if not checkpoint.has(layout.scale_names(0)[0]):
            raise CheckpointError(
                f"{candidate} has no KV-cache scales ({layout.scale_names(0)[0]!r} is missing); run "
                "`kvant calibrate` on it, or pass --unit-scales to evaluate scale 1.0 explicitly"
            )
        scales = {layer: _scales(checkpoint, layout.scale_names(layer)) for layer in range(layout.layers)}
    finally:
        checkpoint.close()
    return KVTap(layout.kind, scales, kv_dtype=options.kv_dtype), "checkpoint"


def _scales(checkpoint: Checkpoint, names: tuple[str, str]) -> tuple[float, float]:
    values = []
    for name in names:
        tensor = checkpoint.read(name).float()
        if tensor.numel() != 1 or not float(tensor.reshape(())) > 0:
            where = f"{checkpoint.directory}: KV scale {name!r}"
            raise CheckpointError(f"{where} is {tensor.tolist()}; it must be one positive value")
        values.append(float(tensor.reshape(())))
    return values[0], values[1]


def run_lockstep(
    reference: Path,
    candidate: Path,
    samples: list[torch.Tensor],
    tap: KVTap | None,
    *,
    device: torch.device,
    say: Callable[[str], None],
) -> Agreement:
    """Reference and candidate layer by layer in lockstep, the candidate's K/V through `tap`; the
    agreement of their next-token distributions on `samples`."""
    ref, cand = LayerStream(reference, device), LayerStream(candidate, device)
    try:
        if len(ref.layers) != len(cand.layers) or ref.config.vocab_size != cand.config.vocab_size:
            raise CheckpointError(
                f"{candidate} ({len(cand.layers)} layers, vocabulary {cand.config.vocab_size}) is not the "
                f"same model as {reference} ({len(ref.layers)} layers, vocabulary {ref.config.vocab_size})"
            )
        ref_hidden, cand_hidden = ref.embed(samples), cand.embed(samples)
        for index in range(len(ref.layers)):
            with ref.layer(index) as module:
                ref_hidden = ref.run_layer(module, ref_hidden, None)
            with cand.layer(index) as module:
                cand_hidden = cand.run_layer(module, cand_hidden, tap)
            say(f"layer {index + 1}/{len(ref.layers)} done")
        agreement = Agreement()
        for ref_logits, cand_logits, tokens in zip(
            ref.logits(ref_hidden), cand.logits(cand_hidden), samples, strict=True
        ):
            agreement.add(ref_logits, cand_logits, tokens)
        return agreement
    finally:
        ref.close()
        cand.close()
