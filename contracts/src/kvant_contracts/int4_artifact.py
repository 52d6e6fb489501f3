"""The INT4 artifact, tensor by tensor: which source tensors are quantized, and what is written.

One rule for both sides: the converter writes exactly `int4_outputs(...)` for each source tensor, and
the planner sizes the artifact from the same function, so the capacity plan and the artifact agree.

Only 2-D Linear weights (`<module>.weight`) are candidates. `all-linear` takes them all, `experts`
only MoE routed experts (`...experts.<n>...`, not shared experts). The defaults always keep
embeddings, `lm_head`, norms and router gates in source precision; `ignore` patterns keep more.
A pattern is a module name (matching the whole name or its dotted tail) or `re:<regex>` matched from
the start of the module name, as compressed-tensors' `ignore` list reads it. (The artifact's config
lists every kept Linear module by its full name, so SGLang's exact-match reading agrees.)

What a quantized weight becomes (compressed-tensors `pack-quantized`): `weight_packed` int32
`[out, in/8]`, `weight_scale` `[out, in/group]` in the source's dtype (BF16 for FP8-block sources,
which are dequantized first), and `weight_shape` int64 `[2]`. An FP8-block weight that stays
unquantized is written dequantized in BF16; FP8-block scales (`*_scale_inv`) are consumed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

TARGETS: tuple[str, ...] = ("all-linear", "experts")
FP8_SCALE_SUFFIX = "_scale_inv"
# FP8-block weights that stay unquantized are written in this dtype (dequantized once from fp32).
FP8_UNQUANTIZED_DTYPE = "BF16"

_ROUTED_EXPERT = re.compile(r"(^|\.)experts\.\d+\.")


def is_routed_expert(name: str) -> bool:
    """A MoE routed expert's tensor or module (`...experts.<n>...`), not a shared expert's."""
    return bool(_ROUTED_EXPERT.search(name))


_EMBEDDING = re.compile(r"(^|\.)(embed_tokens|embeddings?|wte|wpe|word_embeddings)$")
_LM_HEAD = re.compile(r"(^|\.)(lm_head|embed_out)$")
# Router gates: `mlp.gate`, `block_sparse_moe.gate`, `shared_expert_gate`, `router`; never `gate_proj`.
_ROUTER = re.compile(r"(^|\.)(\w*_)?(gate|router)$")
_NORM = re.compile(r"norm", re.IGNORECASE)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as a safetensors header describes it (dtype in its notation: BF16, F32, I32...)."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TargetRule:
    """Which Linear layers an INT4 conversion quantizes: `targets` narrowed by `ignore`."""

    targets: str = "all-linear"
    ignore: tuple[str, ...] = ()

    def quantizes(self, tensor_name: str, shape: tuple[int, ...]) -> bool:
        return _quantizes(self, tensor_name, shape)


# Memoized: a plan asks about each of a checkpoint's tensors several times (what it converts, what it
# writes, GPTQ's work), and a DeepSeek-V3-sized MoE has some 90,000 of them, each a handful of regex
# searches (its plan took 4.6 s, most of it here). Room for two such checkpoints, about 24 MB each.
@functools.lru_cache(maxsize=1 << 18)
def _quantizes(rule: TargetRule, tensor_name: str, shape: tuple[int, ...]) -> bool:
    if not is_linear_weight(tensor_name, shape):
        return False
    module = module_of(tensor_name)
    if kept_by_default(module) or matches_ignore(module, rule.ignore):
        return False
    return rule.targets == "all-linear" or bool(_ROUTED_EXPERT.search(module))


def module_of(tensor_name: str) -> str:
    return tensor_name.rsplit(".", 1)[0]


def is_linear_weight(tensor_name: str, shape: tuple[int, ...]) -> bool:
    """A 2-D `.weight` that is not an embedding or a norm: what a Linear layer stores."""
    if not tensor_name.endswith(".weight") or len(shape) != 2:
        return False
    module = module_of(tensor_name)
    return not (_EMBEDDING.search(module) or _NORM.search(module.rsplit(".", 1)[-1]))


def kept_by_default(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return bool(
        _EMBEDDING.search(module) or _LM_HEAD.search(module) or _ROUTER.search(module) or _NORM.search(last)
    )


def matches_ignore(module: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], module):
                return True
        elif module == pattern or module.endswith("." + pattern):
            return True
    return False


def is_fp8(dtype: str) -> bool:
    return dtype.startswith("F8_")


def is_fp8_block_scale(tensor_name: str, tensor_names: set[str] | frozenset[str]) -> bool:
    """An FP8-block scale of a weight in the same checkpoint: consumed by the conversion, not written."""
    return (
        tensor_name.endswith(FP8_SCALE_SUFFIX) and tensor_name.removesuffix(FP8_SCALE_SUFFIX) in tensor_names
    )


def quantized_outputs(source: TensorSpec, group_size: int) -> tuple[TensorSpec, ...]:
    """The three pack-quantized tensors of one quantized Linear weight."""
    module = module_of(source.name)
    rows, cols = source.shape
    scale_dtype = FP8_UNQUANTIZED_DTYPE if is_fp8(source.dtype) else source.dtype
    return (
        TensorSpec(f"{module}.weight_packed", "I32", (rows, cols // 8)),
        TensorSpec(f"{module}.weight_scale", scale_dtype, (rows, cols // group_size)),
        TensorSpec(f"{module}.weight_shape", "I64", (2,)),
    )


def int4_outputs(source: TensorSpec, rule: TargetRule, group_size: int) -> tuple[TensorSpec, ...]:
    """What the INT4 conversion writes for one source tensor (not for an FP8-block scale: see above)."""
    if rule.quantizes(source.name, source.shape):
        return quantized_outputs(source, group_size)
    if is_fp8(source.dtype):
        return (TensorSpec(source.name, FP8_UNQUANTIZED_DTYPE, source.shape),)
    return (source,)
