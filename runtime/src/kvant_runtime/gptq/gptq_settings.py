"""The GPTQ settings of a conversion recipe (`kvant convert --method gptq ...`), checked, torch-free.

They are part of the recipe because each of them changes the artifact's bytes: a resume or a rerun
over a published artifact must use the same ones, and the manifest records them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvant_contracts.weights_recipe import GPTQ_ACT_ORDER, GPTQ_DAMPENING, GPTQ_SAMPLES, GPTQ_SEQUENCE_LENGTH
from kvant_runtime.checkpoint import DEVICES
from kvant_runtime.checkpoint.errors import CheckpointError


@dataclass(frozen=True)
class GptqSettings:
    samples: int = GPTQ_SAMPLES
    sequence_length: int = GPTQ_SEQUENCE_LENGTH
    damp: float = GPTQ_DAMPENING  # added to diag(H): damp x mean(diag(H))
    act_order: bool = GPTQ_ACT_ORDER
    data: str | None = None  # a text file or folder; None: the built-in calibration text
    # An expert that sees fewer routed tokens keeps RTN; None: twice the group size (see model_pass).
    min_expert_tokens: int | None = None
    device: str = "cpu"  # float32 on either; the device changes the last bits, hence the bytes

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise CheckpointError(f"--samples {self.samples}: need at least 1 calibration sample")
        if self.sequence_length < 2:
            raise CheckpointError(f"--sequence-length {self.sequence_length}: need at least 2 tokens")
        if not self.damp > 0:
            raise CheckpointError(f"--damp {self.damp}: the dampening must be a positive fraction, e.g. 0.01")
        if self.min_expert_tokens is not None and self.min_expert_tokens < 1:
            raise CheckpointError(f"--min-expert-tokens {self.min_expert_tokens}: need at least 1")
        if self.device not in DEVICES:
            raise CheckpointError(f"--device {self.device!r}: valid values are {', '.join(DEVICES)}")

    def expert_threshold(self, group_size: int) -> int:
        return self.min_expert_tokens if self.min_expert_tokens is not None else 2 * group_size

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
