"""What a weight conversion builds, decided once from what the spec says and what the source is.

The API keeps what the user wrote (an unset field stays unset). Everything that needs the effective
values takes them from `effective_weights`:
- the planner, which sizes the artifact (`status.plan.weights` shows its answer);
- the Job renderers, which tell `kvant convert` exactly that (every value explicit on its argv);
- the artifact key;
- `kvant convert` itself, when a value is left off its command line.
So what is planned is what is built. Targets depend on the source (routed experts for an MoE model,
every Linear for a dense one), which only the plan reads; the Jobs after the plan take them from it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_INT4_METHOD = "rtn"
DEFAULT_GROUP_SIZE = 128
INT4 = "int4"
# Unset targets on an MoE model quantize only the routed experts: they hold almost all the weights,
# while attention and shared experts, run by every token, stay in source precision (the usual recipe
# for W4A16 MoE checkpoints, e.g. Kimi K2's and DeepSeek's INT4 releases).
MOE_DEFAULT_TARGETS = "experts"
DENSE_DEFAULT_TARGETS = "all-linear"
GPTQ = "gptq"
# GPTQ's calibration when spec.weights.gptq (or kvant convert's command line) leaves it out: the
# sample count and length of the GPTQ paper's and llm-compressor's recipes, 1% dampening, and
# activation ordering (columns by decreasing Hessian diagonal), which lowers the error most.
GPTQ_SAMPLES = 128
GPTQ_SEQUENCE_LENGTH = 2048
GPTQ_DAMPENING = 0.01
GPTQ_ACT_ORDER = True


@dataclass(frozen=True)
class WeightsRecipe:
    """The effective conversion: None where a field does not apply (method and group size outside
    INT4; targets when nothing is converted)."""

    format: str
    method: str | None = None
    group_size: int | None = None
    targets: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "method": self.method,
            "groupSize": self.group_size,
            "targets": self.targets,
        }


def default_targets(moe: bool) -> str:
    return MOE_DEFAULT_TARGETS if moe else DENSE_DEFAULT_TARGETS


def int4_scheme(fmt: str, method: str | None, group_size: int | None) -> tuple[str | None, int | None]:
    """(method, group size) in effect: the given ones or the defaults for INT4, none otherwise."""
    if fmt != INT4:
        return None, None
    return method or DEFAULT_INT4_METHOD, group_size or DEFAULT_GROUP_SIZE


def effective_weights(
    fmt: str,
    *,
    method: str | None = None,
    group_size: int | None = None,
    targets: str | None = None,
    converts: bool,
    moe: bool,
) -> WeightsRecipe:
    """The recipe in effect. `converts`: whether weights are converted at all (a quantized format that
    differs from the source's); `moe`: whether the source has routed experts."""
    chosen_method, chosen_group = int4_scheme(fmt, method, group_size)
    if not converts:
        return WeightsRecipe(fmt, chosen_method, chosen_group, None)
    return WeightsRecipe(fmt, chosen_method, chosen_group, targets or default_targets(moe))
