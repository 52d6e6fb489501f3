"""The KV cache's element types, by the names SGLang's `--kv-cache-dtype` gives them: the one list
that the API (`spec.kvCache.dtype`), the launch spec, the simulator, the calibrator, the evaluator
and the FP8 kernels read. Nothing else in the product spells one (tests/unit/
test_contracts_have_one_definition.py); docs/crd-reference.md says what each one means.
"""

from __future__ import annotations

from enum import StrEnum


class KvCacheDtype(StrEnum):
    """KV cache element type, passed to SGLang as --kv-cache-dtype. auto follows the model's dtype."""

    AUTO = "auto"
    BF16 = "bf16"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"

    @property
    def is_fp8(self) -> bool:
        return self in FP8_KV_DTYPES


# The two FP8 formats: the ones calibrated scales map onto.
FP8_KV_DTYPES: tuple[KvCacheDtype, ...] = (KvCacheDtype.FP8_E4M3, KvCacheDtype.FP8_E5M2)
# The format a QuantizedModel and the calibration tools take when none is named: e4m3 keeps three
# mantissa bits where e5m2 keeps two, and SGLang reads a JSON of its scales (kv_scale_delivery).
DEFAULT_KV_DTYPE = KvCacheDtype.FP8_E4M3

KV_DTYPE_NAMES: tuple[str, ...] = tuple(dtype.value for dtype in KvCacheDtype)
FP8_KV_DTYPE_NAMES: tuple[str, ...] = tuple(dtype.value for dtype in FP8_KV_DTYPES)
