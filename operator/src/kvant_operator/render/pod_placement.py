"""A serving role's pod placement: topology spread, anti-affinity and tolerations (spec.serving.placement).

`placement` renders one role's pod fields. Each role spreads among its own pods only (its Deployment's
selector), whatever the other roles do:

- over nodes (`kubernetes.io/hostname`, maxSkew 1): ScheduleAnyway under `preferred`, DoNotSchedule
  under `required`;
- over zones (`topology.kubernetes.io/zone`), always ScheduleAnyway; prefill and decode pods do not
  spread over zones but prefer the zone that already holds the model's engines;
- a preferred anti-affinity to the role's own pods on a node, besides the spread;
- tolerations of a not-ready and an unreachable node for `lostNodeSeconds` when it is set (else
  Kubernetes' admission gives 300 s), then the user's own tolerations. `spread: none` renders these
  tolerations only.

Why each one: see docs/concepts/placement.md ("What each role gets").
"""

from __future__ import annotations

from kvant_contracts.kube_object import Obj
from kvant_operator.api.placement import PlacementSpec, Spread
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL
from kvant_operator.render.roles import Role, RoleKind

NODE_TOPOLOGY = "kubernetes.io/hostname"
ZONE_TOPOLOGY = "topology.kubernetes.io/zone"
LOST_NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
ANTI_AFFINITY_WEIGHT = 100
SAME_ZONE_WEIGHT = 50


def placement(spec: PlacementSpec, model: str, role: Role) -> Obj:
    """The pod spec fields that place one role's pods."""
    tolerated = tolerations(spec)
    fields: Obj = {"tolerations": tolerated} if tolerated else {}
    if spec.spread is Spread.NONE:
        return fields

    def own() -> Obj:  # a fresh selector each time: the pod spec shares no objects between its fields
        return {"matchLabels": role.selector(model)}

    on_nodes = "DoNotSchedule" if spec.spread is Spread.REQUIRED else "ScheduleAnyway"
    constraints = [_spread(NODE_TOPOLOGY, on_nodes, own())]
    affinity: Obj = {"podAntiAffinity": _preferred(ANTI_AFFINITY_WEIGHT, NODE_TOPOLOGY, own())}
    if role.disaggregation is None:
        constraints.append(_spread(ZONE_TOPOLOGY, "ScheduleAnyway", own()))
    else:
        engines = {"matchLabels": {MODEL_LABEL: model, KIND_LABEL: RoleKind.ENGINE.value}}
        affinity["podAffinity"] = _preferred(SAME_ZONE_WEIGHT, ZONE_TOPOLOGY, engines)
    return {**fields, "topologySpreadConstraints": constraints, "affinity": affinity}


def tolerations(spec: PlacementSpec) -> list[Obj]:
    if spec.lost_node_seconds is None:
        return [t.pod_field() for t in spec.tolerations]
    lost = [
        {
            "key": taint,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": spec.lost_node_seconds,
        }
        for taint in LOST_NODE_TAINTS
    ]
    return [*lost, *(t.pod_field() for t in spec.tolerations)]


def _spread(topology: str, when_unsatisfiable: str, selector: Obj) -> Obj:
    return {
        "maxSkew": 1,
        "topologyKey": topology,
        "whenUnsatisfiable": when_unsatisfiable,
        "labelSelector": selector,
    }


def _preferred(weight: int, topology: str, selector: Obj) -> Obj:
    term = {"topologyKey": topology, "labelSelector": selector}
    return {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": term}]}
