"""An operator upgrade restarts no engine by itself: a running Deployment keeps the runtime it has.

The runtime image (gate, launcher, simulator, router) is in every serving pod, and its tag follows
the operator's release. Rendering each release's tag into running Deployments would roll every engine
in the fleet on every `helm upgrade`: minutes without a replica per model for a trillion-parameter
model. So each serving Deployment records, on its own metadata (never in its pod template), the
runtime image its pods run and the digest of the pod template it was rendered with. When the
operator's runtime has moved on, the Deployment is rendered again with the image it records; if that
pod template is the one it runs, the Deployment keeps it and no pod is touched.

A Deployment whose pods change anyway (a spec edit, an engine-affecting setting) takes the operator's
runtime in the same roll. A model annotated `kvant.dev/runtime: follow` always takes it, for an
on-call engineer who wants a gate fix on a model now; each serving Deployment's `kvant.dev/runtime-image`
annotation says which runtime it runs. Deployments rendered before this rule existed carry no record,
and take the operator's runtime on their next roll.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

from kvant_contracts.kube_object import Obj
from kvant_operator.hashing import digest
from kvant_operator.kube_door import KubeDoor
from kvant_operator.object_keys import POD_TEMPLATE_DIGEST, RUNTIME_IMAGE, RUNTIME_POLICY
from kvant_operator.settings import OperatorSettings

FOLLOW = "follow"

Render = Callable[[OperatorSettings], list[Obj]]


def follows(model: Obj) -> bool:
    return ((model["metadata"].get("annotations") or {}).get(RUNTIME_POLICY) or "").strip() == FOLLOW


def template_digest(deployment: Obj) -> str:
    return digest(deployment["spec"]["template"])


def stamped(deployment: Obj, image: str) -> Obj:
    """The Deployment with its runtime record: the image and the digest of its pod template."""
    out = copy.deepcopy(deployment)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[RUNTIME_IMAGE] = image
    annotations[POD_TEMPLATE_DIGEST] = template_digest(deployment)
    return out


def keep_running_runtimes(
    model: Obj, objects: list[Obj], render: Render, kube: KubeDoor, settings: OperatorSettings
) -> list[Obj]:
    """`objects` (rendered with `settings`) with each Deployment either stamped with the operator's
    runtime, or replaced by its rendering with the runtime it already runs when that leaves its pods
    exactly as they are. `render` renders the same objects with other settings."""
    older: dict[str, dict[str, Obj]] = {}  # runtime image -> Deployments rendered with it, by name
    out: list[Obj] = []
    for obj in objects:
        if obj["kind"] != "Deployment":
            out.append(obj)
            continue
        pinned = None if follows(model) else _pinned(obj, render, kube, settings, older=older)
        out.append(pinned or stamped(obj, settings.runtime_image))
    return out


def _pinned(
    obj: Obj, render: Render, kube: KubeDoor, settings: OperatorSettings, *, older: dict[str, dict[str, Obj]]
) -> Obj | None:
    """The Deployment rendered with the runtime it runs, when its pods would stay exactly as they are."""
    meta = obj["metadata"]
    live = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    records = ((live or {}).get("metadata") or {}).get("annotations") or {}
    image = records.get(RUNTIME_IMAGE)
    if not image or image == settings.runtime_image:
        return None
    if image not in older:
        rendered = render(replace(settings, runtime_image=image))
        older[image] = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Deployment"}
    previous = older[image].get(meta["name"])
    if previous is None or template_digest(previous) != records.get(POD_TEMPLATE_DIGEST):
        return None  # its pods change anyway: they take the operator's runtime in the same roll
    return stamped(previous, image)
