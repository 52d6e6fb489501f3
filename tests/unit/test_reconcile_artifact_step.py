"""The artifact step on an in-memory cluster: attempts, progress, retries after a backoff, publishing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from kvant_contracts.job_lines import ConvertProgress
from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import Phase
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.reconcile.artifact_step import ensure_artifact
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render.artifact_record import record_name
from kvant_operator.render.jobs import artifact_job_name
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, NOW, SETTINGS, body, condition, new_pass

RESULT = json.dumps({"event": "done", "digest": "sha256:abc", "bytes": 1234, "sourceBytes": 5678})


def _blocked(kube: MemoryKube, model: Obj, now: datetime = NOW) -> tuple[Phase, Pass]:
    p = new_pass(model, planned=True, now=now)
    with pytest.raises(Blocked) as blocked:
        ensure_artifact(p, kube, SETTINGS)
    return blocked.value.phase, p


def test_a_source_served_as_is_needs_no_artifact() -> None:
    model = body(weights={"format": "bf16"}, kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
    kube, p = MemoryKube(), new_pass(model, planned=True)
    ensure_artifact(p, kube, SETTINGS)
    assert p.artifact is not None and p.artifact.uri == model["spec"]["source"]["uri"]
    assert condition(p, "Converted").reason == "NotRequired"
    assert "unit" in condition(p, "Calibrated").message
    assert kube.created == []


def test_calibration_without_conversion_is_refused_with_the_fix() -> None:
    model = body(weights={"format": "bf16"})  # tiny.yaml asks for calibrated scales
    phase, p = _blocked(MemoryKube(), model)
    assert phase is Phase.FAILED
    degraded = condition(p, "Degraded")
    assert degraded.reason == "CalibrationNeedsConversion" and "(int4)" in degraded.message


def test_first_attempt_runs_reports_progress_then_publishes_the_record() -> None:
    model, kube = body(), MemoryKube()
    key = artifact_key(new_pass(model).spec)
    job = artifact_job_name(key, 1)

    phase, p = _blocked(kube, model)
    assert phase is Phase.CONVERTING and kube.jobs(NAMESPACE) == [job]
    assert condition(p, "Converted").reason == "Starting"

    progress = ConvertProgress("progress", 1, 4, 500_000_000, 2_000_000_000, 1e8, 15.0).fields()
    kube.run_pod(NAMESPACE, job, {"convert": json.dumps(progress)})
    phase, p = _blocked(kube, model)
    assert phase is Phase.CONVERTING
    assert "1/4 shards, 0.50/2.00 GB, ETA 15s" in condition(p, "Converted").message

    kube.finish_job(NAMESPACE, job, {"convert": "{}", "calibrate": RESULT})
    p = new_pass(model, planned=True)
    ensure_artifact(p, kube, SETTINGS)
    assert p.artifact is not None and (p.artifact.digest, p.artifact.bytes) == ("sha256:abc", 1234)
    assert condition(p, "Calibrated").reason == "ScalesCalibrated"
    record = kube.get("v1", "ConfigMap", NAMESPACE, record_name(key))
    assert record is not None and "ownerReferences" not in record["metadata"]  # it outlives its models


def test_a_published_record_is_reused_without_a_job() -> None:
    model, first = body(), MemoryKube()
    key = artifact_key(new_pass(model).spec)
    _blocked(first, model)
    first.finish_job(NAMESPACE, artifact_job_name(key, 1), {"convert": "{}", "calibrate": RESULT})
    ensure_artifact(new_pass(model, planned=True), first, SETTINGS)

    second = MemoryKube()  # a re-created model: only the record is left
    second.objects = {k: v for k, v in first.objects.items() if k[1] == "ConfigMap"}
    p = new_pass(model, planned=True)
    ensure_artifact(p, second, SETTINGS)
    assert second.created == [] and p.artifact is not None and p.artifact.digest == "sha256:abc"


def test_a_failed_attempt_is_kept_and_retried_after_its_backoff() -> None:
    model, kube = body(), MemoryKube()
    key = artifact_key(new_pass(model).spec)
    _blocked(kube, model)
    kube.finish_job(
        NAMESPACE, artifact_job_name(key, 1), {"convert": "shard 3: truncated file"}, failed="convert"
    )
    phase, p = _blocked(kube, model, now=NOW + timedelta(seconds=5))  # backoff of attempt 1 is 10 s
    assert phase is Phase.CONVERTING and kube.jobs(NAMESPACE) == [artifact_job_name(key, 1)]
    degraded = condition(p, "Degraded")
    assert degraded.reason == "ConversionFailed" and "truncated file" in degraded.message
    assert "retrying in 10s" in degraded.message

    _, p = _blocked(kube, model, now=NOW + timedelta(seconds=11))
    assert kube.jobs(NAMESPACE) == [artifact_job_name(key, 1), artifact_job_name(key, 2)]
    assert [e[1] for e in p.events] == ["ConversionRetry", "ArtifactJobCreated"]
