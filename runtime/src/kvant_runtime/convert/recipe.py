"""What gets quantized: the recipe (format, group size, targets, ignore) and the per-tensor decision.

Only 2-D Linear weights (`<module>.weight`) are candidates. `all-linear` takes them all, `experts`
only MoE routed experts (`...experts.<n>...`, not shared experts). The defaults always keep
embeddings, `lm_head`, norms and router gates in source precision; `ignore` patterns keep more.
A pattern is a module name (matching the whole name or its dotted tail) or `re:<regex>` matched from
the start of the module name, as compressed-tensors' `ignore` list reads it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kvant_kernels.int4 import GROUP_SIZES
from kvant_runtime.convert.errors import ConvertError

Targets = Literal["all-linear", "experts"]
TARGETS: tuple[str, ...] = ("all-linear", "experts")
FORMATS: tuple[str, ...] = ("int4",)

_ROUTED_EXPERT = re.compile(r"(^|\.)experts\.\d+\.")
_EMBEDDING = re.compile(r"(^|\.)(embed_tokens|embeddings?|wte|wpe|word_embeddings)$")
_LM_HEAD = re.compile(r"(^|\.)(lm_head|embed_out)$")
# Router gates: `mlp.gate`, `block_sparse_moe.gate`, `shared_expert_gate`, `router`; never `gate_proj`.
_ROUTER = re.compile(r"(^|\.)(\w*_)?(gate|router)$")
_NORM = re.compile(r"norm", re.IGNORECASE)


@dataclass(frozen=True)
class Recipe:
    format: str = "int4"
    group_size: int = 128
    targets: str = "all-linear"
    ignore: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConvertError(f"--format {self.format!r} is not supported; valid: {', '.join(FORMATS)}")
        if self.group_size not in GROUP_SIZES:
            raise ConvertError(
                f"--group-size {self.group_size} is not supported; valid: {', '.join(map(str, GROUP_SIZES))}"
            )
        if self.targets not in TARGETS:
            raise ConvertError(f"--targets {self.targets!r} is not supported; valid: {', '.join(TARGETS)}")
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as err:
                    raise ConvertError(
                        f"--ignore {pattern!r} is not a valid regular expression: {err}"
                    ) from err

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ignore": list(self.ignore)}


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


def should_quantize(tensor_name: str, shape: tuple[int, ...], recipe: Recipe) -> bool:
    if not is_linear_weight(tensor_name, shape):
        return False
    module = module_of(tensor_name)
    if kept_by_default(module) or matches_ignore(module, recipe.ignore):
        return False
    return recipe.targets == "all-linear" or bool(_ROUTED_EXPERT.search(module))
