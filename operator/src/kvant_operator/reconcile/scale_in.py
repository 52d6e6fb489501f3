"""Scale-in takes the replica with the least work: each pod's deletion cost, written when replicas drop.

Just before the operator lowers an engine Deployment's replicas, `mark_before_scale_in` writes each
pod's deletion cost (`controller.kubernetes.io/pod-deletion-cost`): its engine's KV token usage in the
last protection step, in thousandths (`COST_PER_USAGE`), so the ReplicaSet removes the pod holding the
least first. Costs are written only here, one patch per pod whose cost moved, never on a periodic
pass. Without usage samples nothing is written, and Kubernetes' own order stands.

The write needs `patch` on pods; the chart's ValidatingAdmissionPolicy (pod-writes.yaml) lets the
operator change nothing of a pod but this annotation. A refused write is logged and the scale-in goes
on in Kubernetes' order. See docs/concepts/autoscaling.md ("Which replica leaves").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kubernetes.client.exceptions import ApiException

from kvant_contracts.kube_object import Obj
from kvant_operator.kube_door import KubeDoor
from kvant_operator.object_keys import DELETION_COST
from kvant_operator.reconcile.state import Pass
from kvant_operator.render.roles import engine_roles, workload_name

log = logging.getLogger("kvant.operator")

COST_PER_USAGE = 1000  # KV token usage 0..1 as an integer cost 0..1000


def deletion_costs(pods: list[Obj], usage: Mapping[str, float]) -> dict[str, str]:
    """The cost each pod should carry, for the pods with a usage sample and a different cost now."""
    wanted = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        if name not in usage:
            continue
        cost = str(round(max(0.0, usage[name]) * COST_PER_USAGE))
        if (pod["metadata"].get("annotations") or {}).get(DELETION_COST) != cost:
            wanted[name] = cost
    return wanted


def mark_before_scale_in(p: Pass, kube: KubeDoor, objects: list[Obj]) -> int:
    """Writes deletion costs on the pods of each engine Deployment in `objects` whose replicas are about
    to drop; returns how many pods it wrote."""
    if not p.pod_work:
        return 0
    written = 0
    for role in engine_roles(p.spec):
        name = workload_name(p.model, role)
        desired = next(
            (o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name), None
        )
        live = kube.get("apps/v1", "Deployment", p.namespace, name)
        if desired is None or live is None:
            continue
        replicas = (live.get("spec") or {}).get("replicas")
        if replicas is None or replicas <= desired["spec"].get("replicas", 1):
            continue
        selector = ",".join(f"{key}={value}" for key, value in role.selector(p.model).items())
        pods = kube.list("v1", "Pod", p.namespace, selector)
        for pod, cost in deletion_costs(pods, p.pod_work).items():
            try:
                kube.annotate_pod(p.namespace, pod, DELETION_COST, cost)
            except ApiException as err:
                if err.status != 404:  # a pod gone already needs no cost
                    log.warning(
                        "could not write %s on pod %s/%s (%s %s); the scale-in follows Kubernetes' order",
                        DELETION_COST, p.namespace, pod, err.status, err.reason,
                    )  # fmt: skip
                continue
            written += 1
    return written
