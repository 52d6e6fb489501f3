"""The weight-format registry: one descriptor per format that Kvant can serve, read by every layer.

Adding a format (FP8 weights made by Kvant, W8A8, NVFP4) is one descriptor here, its kernel in
`kvant_kernels`, and its byte rule for the planner; nothing else names a format. Who reads what:

- the API: `spec.weights.format` accepts exactly these names (a test holds the enum to them);
- the operator: whether a conversion Job runs (`converts`) and the words in status (`label`);
- the converter: which `--format` it accepts (`converted_formats`);
- the launcher: which `quantization_config.quant_method` the checkpoint must carry, and the SGLang
  `--quantization` flag for a checkpoint quantized online (`online_quantization`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FormatFacts:
    """What every layer needs to know of one weight format (the API's WeightFormat enum names them)."""

    name: str
    label: str  # for people: status messages, events, errors
    converts: bool  # Kvant makes it with a conversion Job (else the source is served as it is)
    # config.json `quantization_config.quant_method` values SGLang serves this format from; None: the
    # checkpoint has no quantization_config.
    quant_methods: tuple[str | None, ...]
    online_quantization: str | None = None  # SGLang --quantization for a checkpoint without one
    compressed_tensors_format: str | None = None  # the artifact's compressed-tensors `format`


FORMATS: dict[str, FormatFacts] = {
    f.name: f
    for f in (
        FormatFacts("bf16", "BF16", converts=False, quant_methods=(None,)),
        FormatFacts(
            "fp8",
            "FP8",
            converts=False,
            quant_methods=("fp8", "compressed-tensors", None),
            online_quantization="fp8",
        ),
        FormatFacts(
            "int4",
            "INT4",
            converts=True,
            quant_methods=("compressed-tensors",),
            compressed_tensors_format="pack-quantized",
        ),
    )
}


class UnknownWeightFormat(ValueError):
    pass


def weight_format(name: str) -> FormatFacts:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownWeightFormat(
            f"weight format {name!r} is not known; valid: {', '.join(FORMATS)}"
        ) from None


def converted_formats() -> tuple[str, ...]:
    """The formats `kvant convert` makes."""
    return tuple(name for name, f in FORMATS.items() if f.converts)
