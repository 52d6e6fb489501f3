"""The LoRA envelope of a model's engines: how many adapter slots, of what rank, over which modules.

SGLang fixes its adapter pool when an engine starts (`--max-lora-rank`, `--lora-target-modules`,
`--max-loras-per-batch`, `--max-loaded-loras`); an adapter loaded later must fit inside it. The API
(`spec.serving.lora`), the launch spec and the planner read this one definition; the flags it
renders are checked by SGLang's own parser (tests/unit/test_lora_envelope.py). What SGLang does
with each flag, and why these are the ones a live-loading engine needs:
docs/design/adapters-research.md, sections 1 and 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LoraTarget(StrEnum):
    """A projection adapters may change, by the name SGLang's --lora-target-modules takes. Naming
    one of q/k/v (or gate/up) sizes SGLang's buffer for the whole stack. lm_head, embed_tokens and
    all are not offered: the planner does not size their buffers."""

    Q_PROJ = "q_proj"
    K_PROJ = "k_proj"
    V_PROJ = "v_proj"
    O_PROJ = "o_proj"
    GATE_PROJ = "gate_proj"
    UP_PROJ = "up_proj"
    DOWN_PROJ = "down_proj"
    QKV_PROJ = "qkv_proj"
    GATE_UP_PROJ = "gate_up_proj"


# The stacked buffer each target lands in (SGLang's get_normalized_target_modules).
_STACKED = {
    LoraTarget.Q_PROJ: LoraTarget.QKV_PROJ,
    LoraTarget.K_PROJ: LoraTarget.QKV_PROJ,
    LoraTarget.V_PROJ: LoraTarget.QKV_PROJ,
    LoraTarget.GATE_PROJ: LoraTarget.GATE_UP_PROJ,
    LoraTarget.UP_PROJ: LoraTarget.GATE_UP_PROJ,
}
# What a model gets when spec.serving.lora names no targets: every attention and MLP projection,
# the set PEFT's "all-linear" adapters train on a Llama-shaped model.
DEFAULT_TARGETS: tuple[LoraTarget, ...] = (
    LoraTarget.Q_PROJ,
    LoraTarget.K_PROJ,
    LoraTarget.V_PROJ,
    LoraTarget.O_PROJ,
    LoraTarget.GATE_PROJ,
    LoraTarget.UP_PROJ,
    LoraTarget.DOWN_PROJ,
)
# The targets that act on the MLP: on a model with routed experts they are expert modules, whose
# buffers SGLang sizes per expert (the planner refuses them there, in status).
MLP_BUFFERS = frozenset({LoraTarget.GATE_UP_PROJ, LoraTarget.DOWN_PROJ})
# SGLang's own default for --max-loras-per-batch; the base model takes one of these slots.
DEFAULT_SLOTS = 8
LORA_TARGET_NAMES: tuple[str, ...] = tuple(target.value for target in LoraTarget)


def normalized(targets: tuple[LoraTarget, ...]) -> frozenset[LoraTarget]:
    """The pool buffers SGLang allocates for these targets (q/k/v → qkv_proj, gate/up → gate_up_proj)."""
    return frozenset(_STACKED.get(target, target) for target in targets)


@dataclass(frozen=True)
class LoraEnvelope:
    """What every engine of the model reserves for adapters. `max_loaded` None: SGLang's default
    (no bound on adapters held in host memory)."""

    max_rank: int
    targets: tuple[LoraTarget, ...] = DEFAULT_TARGETS
    slots: int = DEFAULT_SLOTS
    max_loaded: int | None = None

    def flags(self) -> list[str]:
        """SGLang's flags for an engine that loads adapters live: the pool is sized by the flags
        alone, since it starts with none (--lora-paths unset)."""
        argv = ["--enable-lora", *self.pool_flags()]
        if self.max_loaded is not None:
            argv += ["--max-loaded-loras", str(self.max_loaded)]
        return argv

    def pool_flags(self) -> list[str]:
        """The three flags that size the pool's memory (what `kvant plan` takes too); maxLoaded
        bounds host memory only."""
        argv = ["--max-lora-rank", str(self.max_rank)]
        argv += ["--lora-target-modules", *(target.value for target in self.targets)]
        return [*argv, "--max-loras-per-batch", str(self.slots)]

    def to_json(self) -> dict[str, object]:
        """The launch spec's `lora` object (the CRD's names)."""
        return {
            "maxRank": self.max_rank,
            "targetModules": [target.value for target in self.targets],
            "slots": self.slots,
            "maxLoaded": self.max_loaded,
        }

    @classmethod
    def from_json(cls, raw: object, source: str) -> LoraEnvelope:
        """The launch spec's `lora` object; ValueError naming the field when it is not one."""
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: lora must be an object with maxRank, targetModules, slots")
        unknown = set(raw) - {"maxRank", "targetModules", "slots", "maxLoaded"}
        if unknown:
            raise ValueError(f"{source}: lora has unknown fields {sorted(unknown)}")
        targets = raw.get("targetModules", [target.value for target in DEFAULT_TARGETS])
        if not isinstance(targets, list) or not targets or any(t not in LORA_TARGET_NAMES for t in targets):
            raise ValueError(
                f"{source}: lora.targetModules must be a non-empty list of {list(LORA_TARGET_NAMES)}"
            )
        counts = {name: raw.get(name) for name in ("maxRank", "slots", "maxLoaded")}
        for name, value in counts.items():
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{source}: lora.{name} must be a positive integer, got {value!r}")
        if counts["maxRank"] is None:
            raise ValueError(f"{source}: lora.maxRank is required")
        envelope = cls(
            max_rank=int(raw["maxRank"]),
            targets=tuple(LoraTarget(t) for t in targets),
            slots=int(raw.get("slots") or DEFAULT_SLOTS),
            max_loaded=raw.get("maxLoaded"),
        )
        if envelope.max_loaded is not None and envelope.max_loaded < envelope.slots:
            raise ValueError(
                f"{source}: lora.maxLoaded {envelope.max_loaded} is below lora.slots {envelope.slots}"
            )
        return envelope
