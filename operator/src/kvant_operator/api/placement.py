"""`spec.serving.placement`: where a model's pods may run and how they spread over nodes and zones.

A model that serves from two replicas on one node loses both with that node; so by default (`spread:
preferred`) each serving role (the engines of `serve`, `prefill` and `decode`, and the routers) prefers
to put its pods on different nodes and zones;
`lostNodeSeconds` can move a lost node's pods sooner than Kubernetes' 300 s.
`render/pod_placement.py` turns this into pod fields; docs/concepts/placement.md says why each
default is what it is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from kvant_operator.api.rules import ApiModel, Rule

# A label key or value as Kubernetes accepts it (prefix/name, 63-character name; value up to 63).
_DNS_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
LABEL_KEY = rf"^{_DNS_PREFIX}[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
LabelKey = Annotated[str, Field(max_length=316, pattern=LABEL_KEY)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
MAX_TOLERATIONS = 32
# Kubernetes marks a silent node NotReady after its node-monitor grace period (40-50 s) and then
# evicts its pods after their toleration of that taint: 300 s unless the pod says otherwise. Kvant
# renders no shorter toleration by default: with 30 s, an e2e on this 2-core machine lost its serving
# engines when the node agent, starved by two CPU engines under a flood, missed its heartbeats for a
# while (the node came back; the evicted engines had to load again). A GPU engine's reload costs
# minutes, so a shorter toleration is a choice to make per cluster (docs/concepts/placement.md).


class Spread(StrEnum):
    """How each serving role's pods spread. preferred: over nodes and zones when the scheduler can,
    never leaving a pod Pending for it; required: never two more on one node than on another (a pod
    waits Pending rather than break it; zones stay preferred); none: no spreading rendered."""

    PREFERRED = "preferred"
    REQUIRED = "required"
    NONE = "none"


class TaintEffect(StrEnum):
    """A taint's effect, as Kubernetes names it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    """Equal matches the taint's value; Exists matches any value (and, without a key, any taint)."""

    EQUAL = "Equal"
    EXISTS = "Exists"


class Toleration(ApiModel):
    """A taint the model's pods tolerate (a GPU node pool's taint, for example), as in a pod spec."""

    rules = (
        Rule(
            cel="has(self.key) || (has(self.operator) && self.operator == 'Exists')",
            message="spec.serving.placement.tolerations[].key is required unless operator is Exists",
            field_path=".key",
            holds=lambda t: t.key is not None or t.operator is TolerationOperator.EXISTS,
        ),
        Rule(
            cel="!has(self.value) || !has(self.operator) || self.operator == 'Equal'",
            message="spec.serving.placement.tolerations[].value must be unset with operator Exists",
            field_path=".value",
            holds=lambda t: t.value is None or t.operator is TolerationOperator.EQUAL,
        ),
        Rule(
            cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="spec.serving.placement.tolerations[].tolerationSeconds applies only with effect "
            "NoExecute",
            field_path=".tolerationSeconds",
            holds=lambda t: t.toleration_seconds is None or t.effect is TaintEffect.NO_EXECUTE,
        ),
    )

    key: LabelKey | None = Field(default=None, description="The taint's key. Unset: every taint (Exists).")
    operator: TolerationOperator = Field(default=TolerationOperator.EQUAL, description="Equal or Exists.")
    value: LabelValue | None = Field(default=None, description="The taint's value (operator Equal).")
    effect: TaintEffect | None = Field(default=None, description="The taint's effect. Unset: every effect.")
    toleration_seconds: int | None = Field(
        default=None, ge=0, le=86400, description="With NoExecute: how long the pod stays once tainted."
    )

    def pod_field(self) -> dict[str, object]:
        """This toleration as a pod spec holds it."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class PlacementSpec(ApiModel):
    """Where the model's engine and router pods run, and how they spread. An edit changes the pods'
    template: the pods roll, one at a time behind their PodDisruptionBudget."""

    # Preferred by default (issue #40). It was `none` for one stop while a real-engine e2e failure was
    # suspected of it; spreading cannot move a pod on a one-node cluster, and the test failed without
    # it too (docs/concepts/placement.md, "A default taken back, and restored").
    spread: Spread = Field(
        default=Spread.PREFERRED,
        description="How each role's pods spread over nodes (kubernetes.io/hostname) and zones "
        "(topology.kubernetes.io/zone, where nodes carry it). Prefill and decode pods each spread among "
        "their own role and prefer the zone of the model's other engines, for the KV transfer.",
    )
    lost_node_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="How long a pod stays on a node that is not ready or unreachable before it is "
        "evicted and started elsewhere (its toleration of those taints). The node is marked so after its "
        "own grace period (40-50 s) first. Unset: Kubernetes' default, 300 s. A short one also evicts "
        "engines from a node whose agent only missed heartbeats for a while, and they load again.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_TOLERATIONS,
        description="Taints the model's pods tolerate, besides the lost-node ones above.",
    )
