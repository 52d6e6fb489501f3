"""The whole reconcile on an in-memory cluster: status assembled in one place, from first pass to Ready."""

from __future__ import annotations

from pathlib import Path

from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.reconcile import Reconciler
from kvant_operator.reconcile.state import Outcome
from kvant_operator.render.jobs import artifact_job_name, plan_job_name
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, NOW, SETTINGS, body, plan_log
from tests.unit.render_inputs import spec_of

RESULT = '{"digest": "sha256:abc", "bytes": 1234, "sourceBytes": 5678}'


def _conditions(outcome: Outcome) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in outcome.status["conditions"]}


def test_an_invalid_spec_fails_naming_the_field() -> None:
    model = body(limits={"maxConcurrency": 0})
    outcome = Reconciler(MemoryKube(), SETTINGS).reconcile(model, now=NOW)
    assert outcome.status["phase"] == "Failed" and not outcome.busy
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "limits.maxConcurrency" in degraded["message"]


def test_a_model_goes_from_planning_to_ready_one_pass_at_a_time(tmp_path: Path) -> None:
    model = body(weights={"format": "int4", "groupSize": 32}, kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
    spec = spec_of(model)
    kube, reconciler = MemoryKube(), Reconciler(MemoryKube(), SETTINGS)
    reconciler.kube = kube

    def step() -> Outcome:
        outcome = reconciler.reconcile(model, now=NOW)
        model["status"] = {**model.get("status", {}), **outcome.status}
        return outcome

    first = step()
    assert (first.status["phase"], first.busy) == ("Pending", True)
    assert _conditions(first)["Ready"] == ("False", "Pending")
    assert _conditions(first)["Degraded"] == ("False", "AsExpected")
    assert first.events[-1][:2] == ("Normal", "PhasePending")

    kube.finish_job(NAMESPACE, plan_job_name("tiny", spec), {"plan": plan_log(model, tmp_path)})
    converting = step()
    assert converting.status["phase"] == "Converting" and "plan" in converting.status

    kube.finish_job(NAMESPACE, artifact_job_name(artifact_key(spec), 1), {"convert": RESULT})
    deploying = step()
    assert deploying.status["phase"] == "Deploying"
    assert deploying.status["artifact"]["digest"] == "sha256:abc"
    assert deploying.status["selector"] == "kvant.dev/model=tiny,kvant.dev/component=engine"

    kube.roll_out(NAMESPACE, "tiny")
    ready = step()
    assert (ready.status["phase"], ready.busy) == ("Ready", False)
    assert _conditions(ready)["Ready"] == ("True", "Serving")
    assert (ready.status["replicas"], ready.status["readyReplicas"]) == (1, 1)

    settled = step()  # nothing changed: the same status, and no phase event
    assert settled.status == ready.status and settled.events == []


def test_a_source_no_type_serves_is_an_invalid_spec_without_a_job() -> None:
    model = body(source={"uri": "ftp://host/model"}, weights={"format": "bf16"}, kvCache={"dtype": "bf16"})
    kube = MemoryKube()
    outcome = Reconciler(kube, SETTINGS).reconcile(model, now=NOW)
    assert outcome.status["phase"] == "Failed"
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert (
        degraded["reason"] == "InvalidSpec"
        and "pvc://<claim>/<path>" in degraded["message"]
        and "s3://<bucket>/<prefix>" in degraded["message"]
    )
    assert kube.created == []


def test_a_newer_crds_fields_are_left_out_and_said_once_per_generation() -> None:
    """Between an upgrade's CRD and its operator, the API server shows the new CRD's defaults: the
    running operator reconciles what it knows instead of failing every model (reconcile/newer_fields)."""
    model = body()
    model["spec"]["serving"]["laterField"] = {"mode": "new"}
    model["spec"]["newerSection"] = {"enabled": True}
    kube = MemoryKube()
    first = Reconciler(kube, SETTINGS).reconcile(model, now=NOW)
    assert first.status["phase"] == "Pending"
    assert _conditions(first)["Degraded"] == ("False", "AsExpected")
    warning = [e for e in first.events if e[1] == "UnknownFields"]
    assert len(warning) == 1 and "spec.serving.laterField, spec.newerSection" in warning[0][2]
    model["status"] = first.status  # this generation observed: not said again
    again = Reconciler(kube, SETTINGS).reconcile(model, now=NOW)
    assert not [e for e in again.events if e[1] == "UnknownFields"]


def test_an_unknown_field_next_to_an_invalid_one_is_still_an_invalid_spec() -> None:
    model = body(limits={"maxConcurrency": 0})
    model["spec"]["newerSection"] = {"enabled": True}
    outcome = Reconciler(MemoryKube(), SETTINGS).reconcile(model, now=NOW)
    assert outcome.status["phase"] == "Failed"
    assert _conditions(outcome)["Degraded"] == ("True", "InvalidSpec")
