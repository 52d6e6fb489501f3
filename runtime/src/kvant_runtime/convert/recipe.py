"""The conversion recipe (format, group size, targets, ignore, rounding method), checked as `kvant
convert` takes it.

`method` says how INT4 codes are chosen: `rtn` (round to nearest, the default) or `gptq` (calibrated,
error-compensating; its settings ride along in `gptq`). The recipe JSON always names the method, so a
manifest says how its artifact was made; a published recipe without one (older artifacts) means rtn.

Which tensors it quantizes, and what it writes for each, is the shared rule in
`kvant_contracts.int4_artifact` (the planner sizes the artifact from the same rule).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kvant_contracts.int4_artifact import TARGETS, TargetRule
from kvant_contracts.weight_formats import converted_formats
from kvant_contracts.weights_recipe import (
    DEFAULT_GROUP_SIZE,
    DEFAULT_INT4_METHOD,
    DENSE_DEFAULT_TARGETS,
    GPTQ,
)
from kvant_kernels.int4 import GROUP_SIZES
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.gptq.gptq_settings import GptqSettings

FORMATS = converted_formats()
METHODS = (DEFAULT_INT4_METHOD, GPTQ)


@dataclass(frozen=True)
class Recipe:
    format: str = "int4"
    group_size: int = DEFAULT_GROUP_SIZE
    targets: str = DENSE_DEFAULT_TARGETS  # kvant convert resolves an unset --targets by the source
    ignore: tuple[str, ...] = field(default_factory=tuple)
    method: str = DEFAULT_INT4_METHOD
    gptq: GptqSettings | None = None  # set for method gptq (defaults when not given), None for rtn

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise CheckpointError(f"--method {self.method!r} is not supported; valid: {', '.join(METHODS)}")
        if self.method == "rtn" and self.gptq is not None:
            raise CheckpointError("GPTQ settings (--samples, --damp, ...) apply only to --method gptq")
        if self.method == "gptq" and self.gptq is None:
            object.__setattr__(self, "gptq", GptqSettings())
        if self.format not in FORMATS:
            raise CheckpointError(f"--format {self.format!r} is not supported; valid: {', '.join(FORMATS)}")
        if self.group_size not in GROUP_SIZES:
            raise CheckpointError(
                f"--group-size {self.group_size} is not supported; valid: {', '.join(map(str, GROUP_SIZES))}"
            )
        if self.targets not in TARGETS:
            raise CheckpointError(f"--targets {self.targets!r} is not supported; valid: {', '.join(TARGETS)}")
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as err:
                    raise CheckpointError(
                        f"--ignore {pattern!r} is not a valid regular expression: {err}"
                    ) from err

    @property
    def rule(self) -> TargetRule:
        return TargetRule(self.targets, self.ignore)

    def to_json(self) -> dict[str, Any]:
        data = {**asdict(self), "ignore": list(self.ignore)}
        if self.gptq is None:
            del data["gptq"]
        return data


def same_recipe(published: dict[str, Any], recipe: Recipe) -> bool:
    """Whether a published manifest's recipe is `recipe`; one written before methods existed is rtn."""
    return {"method": "rtn", **published} == recipe.to_json()
