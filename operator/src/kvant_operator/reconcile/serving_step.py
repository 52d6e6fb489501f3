"""The serving step: apply what serves the model and read how far its rollout has come.

The objects come from `render.serving.serving_objects`, the one list `kvant render` prints too.
While an earlier step is blocked, `ready_while_blocked` says whether the previous generation still
serves, so kstatus and Argo CD see Ready only when something actually answers.
"""

from __future__ import annotations

from functools import partial

from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.status import Phase
from kvant_operator.artifact_recipe import artifact_key, artifact_location, needs_artifact, source_location
from kvant_operator.kube_door import KubeDoor
from kvant_operator.object_keys import COMPONENT_LABEL, MODEL_LABEL, SERVING_COMPONENT
from kvant_operator.reconcile.autoscaling_status import read_autoscaling
from kvant_operator.reconcile.engine_check import read_engine_check
from kvant_operator.reconcile.runtime_pin import keep_running_runtimes
from kvant_operator.reconcile.scale_in import mark_before_scale_in
from kvant_operator.reconcile.state import Pass
from kvant_operator.render.meta import with_applied_hash
from kvant_operator.render.roles import roles, workload_name
from kvant_operator.render.router import router_role
from kvant_operator.render.serving import SERVING_KINDS, ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings


def serve(p: Pass, kube: KubeDoor, settings: OperatorSettings) -> tuple[Phase, bool]:
    """Applies the serving objects (all on a resync; else only the limits when protection moved them)
    and returns the phase and whether the rollout is still busy."""
    objects = desired_objects(p, settings)
    if not p.resync:  # settled and unchanged: only protection may have moved the limits
        objects = [o for o in objects if o["kind"] == "ConfigMap"] if p.protection is not None else []
    else:  # an operator upgrade alone restarts no engine (reconcile/runtime_pin.py)
        objects = keep_running_runtimes(p.body, objects, partial(desired_objects, p), kube, settings)
    if p.resync:  # a scale-in comes with a spec change, which always resyncs
        mark_before_scale_in(p, kube, objects)
    for obj in objects:
        kube.ensure(with_applied_hash(obj))
    if p.resync and spec_changed(p.body):
        prune(p.body, kube, objects)
    phase, busy = rollout_status(p, kube)
    p.autoscaling = read_autoscaling(p, kube)
    if read_engine_check(p, kube, settings, rolling=busy):
        return Phase.DEGRADED, True
    return phase, busy


def spec_changed(body: Obj) -> bool:
    """A generation the status has not observed yet: the one time the set of objects may change."""
    observed = (body.get("status") or {}).get("observedGeneration")
    return bool(observed != body["metadata"].get("generation"))


def prune(body: Obj, kube: KubeDoor, desired: list[Obj]) -> None:
    """Deletes the model's serving objects that the spec no longer renders: a router turned off, a
    mesh Service at one router replica, a role gone with prefill/decode. Only on a spec change (a
    settled model lists nothing), only objects with the model's serving labels, and only those this
    model owns, each by its uid."""
    keep = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in desired}
    namespace, model = body["metadata"]["namespace"], body["metadata"]["name"]
    selector = f"{MODEL_LABEL}={model},{COMPONENT_LABEL}={SERVING_COMPONENT}"
    for api_version, kind, _ in SERVING_KINDS:
        if kind == "ConfigMap":  # the limits ConfigMap is always rendered; records are never deleted
            continue
        for live in kube.list(api_version, kind, namespace, selector):
            meta = live["metadata"]
            owned = any(
                o.get("uid") == body["metadata"].get("uid") for o in meta.get("ownerReferences") or []
            )
            if owned and (api_version, kind, meta["name"]) not in keep:
                kube.delete(api_version, kind, namespace, meta["name"], meta["uid"])


def desired_objects(p: Pass, settings: OperatorSettings) -> list[Obj]:
    assert p.plan is not None and p.artifact is not None
    if p.protection is not None:
        effective = p.protection.effective_concurrency
    else:
        effective = ((p.body.get("status") or {}).get("protection") or {}).get("effectiveConcurrency")
    if needs_artifact(p.spec):
        location = artifact_location(p.spec, settings, artifact_key(p.spec, p.source))
    else:
        location = source_location(p.spec, p.source)
    inputs = ServingInputs(p.body, p.spec, p.plan, location, p.artifact.digest, settings)
    return serving_objects(inputs, effective)


def rollout_status(p: Pass, kube: KubeDoor) -> tuple[Phase, bool]:
    deployments = _deployments(p, kube)
    pending, existing, ready = [], 0, 0
    for role, live in zip(roles(p.spec), deployments, strict=True):
        existing += (live.get("status") or {}).get("replicas", 0)
        ready += (live.get("status") or {}).get("readyReplicas", 0)
        waiting = rollout_pending(live, role.replicas)
        if waiting:
            pending.append(f"{role.name}: {waiting}")
    p.replicas = (existing, ready)  # engines only: the scale subresource counts serving replicas
    router = router_role(p.spec)
    if router is not None:
        live = kube.get("apps/v1", "Deployment", p.namespace, workload_name(p.model, router)) or {}
        waiting = rollout_pending(live, router.replicas)
        if waiting:
            pending.append(f"{router.name}: {waiting}")
    if pending:
        message = "; ".join(pending)
        p.condition(ConditionType.READY, False, "RollingOut", message)
        p.condition(ConditionType.PROGRESSING, True, "RollingOut", message)
        _serving(p, deployments, "RollingOut", "replicas serve while the rollout completes")
        return Phase.DEPLOYING, True
    p.condition(ConditionType.READY, True, "Serving", "all serving replicas are ready behind the gate")
    p.condition(ConditionType.SERVING, True, "CurrentGeneration", "the current generation serves")
    p.condition(ConditionType.PROGRESSING, False, "Settled", "the current generation is fully rolled out")
    return Phase.READY, False


def ready_while_blocked(p: Pass, kube: KubeDoor, phase: Phase) -> None:
    """Not Ready while the current generation plans, converts or fails; the previous generation's
    Deployments may still serve, which `Serving` says."""
    message = f"the current generation is not serving: phase {phase.value}"
    p.condition(ConditionType.READY, False, phase.value, message)
    serves = f"the previous generation serves while this one is {phase.value}"
    _serving(p, _deployments(p, kube), "PreviousGeneration", serves)


def _deployments(p: Pass, kube: KubeDoor) -> list[Obj]:
    """The live Deployment of each role, in role order ({} where there is none yet)."""
    return [
        kube.get("apps/v1", "Deployment", p.namespace, workload_name(p.model, r)) or {} for r in roles(p.spec)
    ]


def _serving(p: Pass, deployments: list[Obj], reason: str, message: str) -> None:
    """Serving is True while every role has a ready replica, whichever generation it runs."""
    if all((d.get("status") or {}).get("readyReplicas", 0) > 0 for d in deployments):
        p.condition(ConditionType.SERVING, True, reason, message)
    else:
        p.condition(ConditionType.SERVING, False, "NoReadyReplicas", "no replica of every role is ready yet")


def rollout_pending(live: Obj, replicas: int) -> str:
    """Why a Deployment is not rolled out yet, or "" when it is."""
    if not live:
        return "deployment not created yet"
    status = live.get("status") or {}
    if status.get("observedGeneration", 0) < live["metadata"].get("generation", 0):
        return "deployment controller has not seen the update yet"
    updated, ready = status.get("updatedReplicas", 0), status.get("readyReplicas", 0)
    total = status.get("replicas", 0)
    if updated < replicas or ready < replicas or total > replicas:
        return f"{ready}/{replicas} ready, {updated} updated, {total} total"
    return ""
