"""SGLang's own admission knobs a QuantizedModel may set (`spec.serving.scheduler`), defined once for
the API, the launcher that applies them and the simulator that mirrors them.

SGLang reserves KV for every request it admits: the uncached prompt plus min(max_new_tokens,
`clipMaxNewTokensEstimation`), less what the running batch is expected to grow, at a
`new_token_ratio` that starts at 0.7 x `conservativeness` (at most 1), falls on every decode step
without a retraction to `minNewTokenRatioFactor` of that over `newTokenRatioDecaySteps` steps, and
jumps up after a retraction (sglang 0.5.23 `srt/managers/schedule_policy.py`, `NewTokenRatioTracker`).
A higher conservativeness or factor admits less optimistically and retracts less.

SGLang reads all four once, when it starts (the flag by its parser, the three environment variables
at import or scheduler init; its `/set_internal_state` refuses them): they are launch settings, and
changing one restarts the engine. Kvant leaves each at SGLang's default unless the model sets it:
the sweep measurable here runs on a CPU, where a decode step's cost grows with the batch and barely
does on a GPU, so it cannot choose a GPU's defaults (bench/README.md, "SGLang's own knobs").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# SGLang's SGLANG_INIT_NEW_TOKEN_RATIO: the starting ratio at conservativeness 1.
INIT_NEW_TOKEN_RATIO = 0.7
# SGLang's SGLANG_RETRACT_DECODE_STEPS: the steps of room a retraction leaves each survivor.
RETRACT_DECODE_STEPS = 20


@dataclass(frozen=True)
class Knob:
    field: str  # the CRD's and the launch spec's name
    sglang: str  # SGLang's flag or environment variable
    default: float  # SGLang 0.5.23's own
    integer: bool  # an integer knob (SGLang parses it with int())
    upper: float  # the largest value the API accepts
    description: str


CONSERVATIVENESS = Knob(
    "conservativeness",
    "--schedule-conservativeness",
    1.0,
    False,
    10.0,
    "SGLang's --schedule-conservativeness: the running batch's expected growth starts at 0.7 x this "
    "(at most 1). Higher admits less optimistically and retracts less.",
)
MIN_NEW_TOKEN_RATIO_FACTOR = Knob(
    "minNewTokenRatioFactor",
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
    0.14,
    False,
    1.0,
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR: the floor the expected growth decays to, as a share of its start.",
)
NEW_TOKEN_RATIO_DECAY_STEPS = Knob(
    "newTokenRatioDecaySteps",
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
    600,
    True,
    1_000_000,
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS: decode steps without a retraction over which the expected "
    "growth falls from its start to its floor.",
)
CLIP_MAX_NEW_TOKENS = Knob(
    "clipMaxNewTokensEstimation",
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION",
    4096,
    True,
    1 << 20,
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION: the most output tokens SGLang plans for per request, "
    "whatever its max_new_tokens.",
)
KNOBS = (CONSERVATIVENESS, MIN_NEW_TOKEN_RATIO_FACTOR, NEW_TOKEN_RATIO_DECAY_STEPS, CLIP_MAX_NEW_TOKENS)
# The three SGLang reads from its environment; the launcher sets them before it starts SGLang.
ENV_KNOBS = (MIN_NEW_TOKEN_RATIO_FACTOR, NEW_TOKEN_RATIO_DECAY_STEPS, CLIP_MAX_NEW_TOKENS)
BY_FIELD = {knob.field: knob for knob in KNOBS}


def problem(field: str, value: object) -> str | None:
    """Why `value` is not a valid setting of the knob `field`; None when it is."""
    knob = BY_FIELD.get(field)
    if knob is None:
        return f"unknown scheduler knob {field!r}; valid: {', '.join(BY_FIELD)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"scheduler.{field} must be a number, got {value!r}"
    if knob.integer and not isinstance(value, int):
        return f"scheduler.{field} must be a whole number, got {value!r}"
    if not (math.isfinite(value) and 0 < value <= knob.upper):
        return f"scheduler.{field} must be above 0 and at most {knob.upper:g}, got {value!r}"
    return None


def engine_env(values: Mapping[str, float]) -> dict[str, str]:
    """The environment variables for the knobs set in `values` (by field name)."""
    return {knob.sglang: _text(knob, values[knob.field]) for knob in ENV_KNOBS if knob.field in values}


def engine_flags(values: Mapping[str, float]) -> list[str]:
    """SGLang's command-line flags for the knobs set in `values`."""
    if CONSERVATIVENESS.field not in values:
        return []
    return [CONSERVATIVENESS.sglang, _text(CONSERVATIVENESS, values[CONSERVATIVENESS.field])]


def _text(knob: Knob, value: float) -> str:
    return str(int(value)) if knob.integer else repr(float(value))
