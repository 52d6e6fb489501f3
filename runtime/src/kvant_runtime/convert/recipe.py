"""The conversion recipe (format, group size, targets, ignore), checked as `kvant convert` takes it.

Which tensors it quantizes, and what it writes for each, is the shared rule in
`kvant_contracts.int4_artifact` (the planner sizes the artifact from the same rule).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kvant_contracts.int4_artifact import TARGETS, TargetRule
from kvant_contracts.weight_formats import converted_formats
from kvant_kernels.int4 import GROUP_SIZES
from kvant_runtime.convert.convert_errors import ConvertError

FORMATS = converted_formats()


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

    @property
    def rule(self) -> TargetRule:
        return TargetRule(self.targets, self.ignore)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ignore": list(self.ignore)}
