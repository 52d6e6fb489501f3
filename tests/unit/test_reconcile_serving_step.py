"""The serving step on an in-memory cluster: what it applies, and how it reads the rollout."""

from __future__ import annotations

from typing import Any

from kvant_operator.api.status import ArtifactStatus, Phase
from kvant_operator.reconcile.serving_step import ready_while_blocked, serve
from kvant_operator.reconcile.state import Pass
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, condition, new_pass

ARTIFACT = ArtifactStatus(uri="pvc://kvant-artifacts/abc", digest="sha256:abc")


def _serving_pass(**overrides: Any) -> Pass:
    p = new_pass(body(**overrides), planned=True)
    p.artifact = ARTIFACT
    return p


def test_serve_applies_limits_workload_service_and_budget_then_waits() -> None:
    kube, p = MemoryKube(), _serving_pass()
    phase, busy = serve(p, kube, SETTINGS)
    assert (phase, busy) == (Phase.DEPLOYING, True)
    kinds = sorted(k[1] for k in kube.applied)
    gate_access = ["Role", "RoleBinding", "ServiceAccount"]  # the gate reads its limits ConfigMap
    assert kinds == sorted(
        ["ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service", *gate_access]
    )
    assert condition(p, "Ready").reason == "RollingOut"


def test_a_finished_rollout_is_ready_and_an_unchanged_one_applies_nothing() -> None:
    kube = MemoryKube()
    serve(_serving_pass(), kube, SETTINGS)
    kube.roll_out(NAMESPACE, "tiny")
    p = _serving_pass()
    applied = len(kube.applied)
    assert serve(p, kube, SETTINGS) == (Phase.READY, False)
    assert len(kube.applied) == applied  # the applied hash matched: nothing sent
    assert condition(p, "Ready").reason == "Serving" and p.replicas == (1, 1)

    p = _serving_pass()
    p.resync = False
    kube.objects.clear()  # even a vanished object is not re-applied without a resync
    serve(p, kube, SETTINGS)
    assert len(kube.applied) == applied


def test_prefill_and_decode_are_rolled_out_separately() -> None:
    pd = {"mode": "prefill-decode", "prefill": {"replicas": 1}, "decode": {"replicas": 2}}
    kube = MemoryKube()
    serve(_serving_pass(serving={**body()["spec"]["serving"], "disaggregation": pd}), kube, SETTINGS)
    kube.roll_out(NAMESPACE, "tiny-prefill")
    p = _serving_pass(serving={**body()["spec"]["serving"], "disaggregation": pd})
    assert serve(p, kube, SETTINGS) == (Phase.DEPLOYING, True)
    message = condition(p, "Ready").message
    assert message.startswith("decode: ") and "prefill" not in message  # only the unfinished role


def test_while_a_new_generation_converts_the_model_is_not_ready_but_still_serving() -> None:
    kube, p = MemoryKube(), new_pass(body())
    ready_while_blocked(p, kube, Phase.CONVERTING)
    assert condition(p, "Ready").status == "False"
    assert condition(p, "Serving").status == "False"  # nothing has ever served

    serve(_serving_pass(), kube, SETTINGS)
    kube.roll_out(NAMESPACE, "tiny")
    p = new_pass(body())
    ready_while_blocked(p, kube, Phase.CONVERTING)
    assert (condition(p, "Ready").status, condition(p, "Ready").reason) == ("False", "Converting")
    serving = condition(p, "Serving")
    assert (serving.status, serving.reason) == ("True", "PreviousGeneration")


def test_a_spec_change_deletes_what_it_no_longer_renders_and_only_the_models_own() -> None:
    kube = MemoryKube()
    routed = {**body()["spec"]["serving"], "replicas": 2}
    serve(_serving_pass(serving=routed), kube, SETTINGS)
    router = ("apps/v1", "Deployment", NAMESPACE, "tiny-router")
    mesh = ("v1", "Service", NAMESPACE, "tiny-router-mesh")
    assert router in kube.objects and mesh in kube.objects
    # Someone else's object with the same labels, owned by another model: never Kvant's to delete.
    stranger = kube.objects[mesh] | {"metadata": {**kube.objects[mesh]["metadata"], "name": "not-ours"}}
    stranger["metadata"]["ownerReferences"] = [{"uid": "another-model"}]
    kube.objects[("v1", "Service", NAMESPACE, "not-ours")] = stranger

    settled = _observed_pass(routed, observed_generation=3)
    serve(settled, kube, SETTINGS)
    assert kube.deleted == []  # a settled model (its generation observed) lists and deletes nothing

    one = _observed_pass({**routed, "replicas": 1}, observed_generation=2)
    serve(one, kube, SETTINGS)
    gone = {(kind, name) for _, kind, _, name in kube.deleted}
    assert gone == {
        ("Deployment", "tiny-router"),
        ("Service", "tiny-router-mesh"),
        ("PodDisruptionBudget", "tiny-router"),
        ("NetworkPolicy", "tiny-router"),
        ("ServiceAccount", "tiny-router"),
        ("Role", "tiny-router"),
        ("RoleBinding", "tiny-router"),
    }
    assert ("v1", "Service", NAMESPACE, "not-ours") in kube.objects
    assert ("apps/v1", "Deployment", NAMESPACE, "tiny") in kube.objects  # the engines stay
    assert ("v1", "Service", NAMESPACE, "tiny") in kube.objects  # now the engines' own Service


def _observed_pass(serving: dict[str, Any], observed_generation: int) -> Pass:
    """A pass of the model at generation 3 whose status has observed `observed_generation`."""
    model = body(serving=serving)
    model["status"] = {"observedGeneration": observed_generation}
    p = new_pass(model, planned=True)
    p.artifact = ARTIFACT
    return p
