"""An operator upgrade brings a new runtime image; a running model keeps the one it runs, and takes the
new one only when its pods roll anyway, or when it is annotated to follow (reconcile/runtime_pin.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvant_operator.api.status import ArtifactStatus
from kvant_operator.kube_cache import serving_entry
from kvant_operator.object_keys import POD_TEMPLATE_DIGEST, RUNTIME_IMAGE, RUNTIME_POLICY
from kvant_operator.reconcile.serving_step import serve
from kvant_operator.reconcile.state import Pass
from kvant_operator.settings import OperatorSettings
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, body, new_pass

OLD = OperatorSettings(runtime_image="ghcr.io/kvant-dev/kvant-runtime:0.1.0")
NEW = OperatorSettings(runtime_image="ghcr.io/kvant-dev/kvant-runtime:0.2.0")
ARTIFACT = ArtifactStatus(uri="pvc://kvant-artifacts/abc", digest="sha256:abc")


def _pass(model: dict[str, Any]) -> Pass:
    p = new_pass(model, planned=True)
    p.artifact = ARTIFACT
    return p


def _deployment(kube: MemoryKube) -> dict[str, Any]:
    """The Deployment as stored (not as the door under test answers)."""
    return copy.deepcopy(kube.objects[("apps/v1", "Deployment", NAMESPACE, "tiny")])


def _images(deployment: dict[str, Any]) -> set[str]:
    pod = deployment["spec"]["template"]["spec"]
    return {c["image"] for c in [*pod["containers"], *pod.get("initContainers", [])]}


class SummaryKube(MemoryKube):
    """Answers a Deployment's `get` as the operator's watch-backed cache does: with the summary its
    index keeps (kube_cache.serving_entry), not the whole object."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        live = super().get(api_version, kind, namespace, name)
        entry = serving_entry(live) if live is not None and kind == "Deployment" else None
        return entry[(namespace, name)] if entry else live


def _served_by_the_old_release(kube: MemoryKube | None = None) -> MemoryKube:
    kube = kube or MemoryKube()
    serve(_pass(body()), kube, OLD)
    kube.roll_out(NAMESPACE, "tiny")
    return kube


def test_the_old_release_records_the_runtime_and_template_it_rendered() -> None:
    live = _deployment(_served_by_the_old_release())
    annotations = live["metadata"]["annotations"]
    assert annotations[RUNTIME_IMAGE] == OLD.runtime_image
    assert annotations[POD_TEMPLATE_DIGEST]
    # The record is on the Deployment, not in its pods: writing it changes no pod.
    assert RUNTIME_IMAGE not in (live["spec"]["template"]["metadata"].get("annotations") or {})


@pytest.mark.parametrize("door", [MemoryKube, SummaryKube], ids=["api-server", "watch-cache"])
def test_an_upgrade_alone_leaves_the_pod_template_as_it_is(door: type[MemoryKube]) -> None:
    kube = _served_by_the_old_release(door())
    before = _deployment(kube)
    applied = len(kube.applied)
    serve(_pass(body()), kube, NEW)
    after = _deployment(kube)
    assert after["spec"]["template"] == before["spec"]["template"]
    assert OLD.runtime_image in _images(after) and NEW.runtime_image not in _images(after)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert not [k for k in kube.applied[applied:] if k[1] == "Deployment"]


def test_a_spec_edit_that_rolls_the_pods_takes_the_new_runtime_in_the_same_roll() -> None:
    kube = _served_by_the_old_release()
    edited = body(kvCache={"dtype": "bf16"})  # the engine's KV dtype: its pods roll
    serve(_pass(edited), kube, NEW)
    live = _deployment(kube)
    assert NEW.runtime_image in _images(live) and OLD.runtime_image not in _images(live)
    assert live["metadata"]["annotations"][RUNTIME_IMAGE] == NEW.runtime_image


def test_a_limits_edit_rolls_nothing_and_keeps_the_old_runtime() -> None:
    kube = _served_by_the_old_release()
    before = _deployment(kube)
    serve(_pass(body(limits={"maxConcurrency": 3})), kube, NEW)
    assert _deployment(kube)["spec"]["template"] == before["spec"]["template"]


def test_a_model_annotated_to_follow_takes_the_new_runtime_at_once() -> None:
    kube = _served_by_the_old_release()
    model = body()
    model["metadata"]["annotations"] = {RUNTIME_POLICY: "follow"}
    serve(_pass(model), kube, NEW)
    assert NEW.runtime_image in _images(_deployment(kube))


def test_a_deployment_without_a_record_takes_the_operators_runtime() -> None:
    kube = _served_by_the_old_release()
    key = ("apps/v1", "Deployment", NAMESPACE, "tiny")
    del kube.objects[key]["metadata"]["annotations"][RUNTIME_IMAGE]  # rendered before the record existed
    serve(_pass(body()), kube, NEW)
    assert NEW.runtime_image in _images(_deployment(kube))
