"""The fetch step on an in-memory cluster: one Job per request, progress, retries after a backoff, the
record shared by models, the revision pinned in status, and the fetched folder feeding every Job."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from kvant_contracts.job_lines import FetchProgress
from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import Phase, SourceStatus
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.reconcile.fetch_step import ensure_source
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import jobs
from kvant_operator.render.fetch_job import fetch_job_name, fetch_key, record_name
from kvant_operator.settings import OperatorSettings
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, NOW, SETTINGS, body, condition, new_pass

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESULT = json.dumps(
    {
        "sourceDigest": "sha256:" + "ab" * 32,
        "revision": COMMIT,
        "path": f"hf/org/tiny/{COMMIT}",
        "bytes": 2_000_000,
        "files": 5,
    }
)
FETCHING = {"uri": "hf://org/tiny", "revision": "main", "credentialsSecret": "hf-token"}


def fetched_model(name: str = "tiny", **source: Any) -> Obj:
    model = body(source={**FETCHING, **source})
    model["metadata"].update({"name": name, "uid": f"uid-{name}"})
    return model


def blocked(
    kube: MemoryKube, model: Obj, settings: OperatorSettings = SETTINGS, **kw: Any
) -> tuple[Phase, Pass]:
    p = new_pass(model, **kw)
    with pytest.raises(Blocked) as stopped:
        ensure_source(p, kube, settings)
    return stopped.value.phase, p


def test_a_source_read_in_place_is_not_fetched() -> None:
    kube, p = MemoryKube(), new_pass(body())
    ensure_source(p, kube, SETTINGS)
    assert p.source is None and kube.created == []


def test_the_fetch_job_gets_the_request_and_only_its_pod_gets_the_credentials() -> None:
    kube, model = MemoryKube(), fetched_model(allowPatterns=["*.safetensors", "config.json"])
    settings = OperatorSettings(
        hf_endpoint="http://hub.local:8080", source_credentials_secret="default-creds"
    )
    phase, p = blocked(kube, model, settings)
    key = fetch_key(p.spec, settings)
    assert phase is Phase.FETCHING and kube.jobs(NAMESPACE) == [fetch_job_name(key, 1)]
    job = kube.get("batch/v1", "Job", NAMESPACE, fetch_job_name(key, 1))
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[:3] == ["fetch", "hf://org/tiny", "/artifacts/sources"]
    assert args[args.index("--revision") + 1] == "main"
    assert args[args.index("--hf-endpoint") + 1] == "http://hub.local:8080"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--allow-pattern"] == [
        "*.safetensors",
        "config.json",
    ]
    # The spec's Secret, required (a missing one shows as a waiting pod), as env of this pod only.
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token", "optional": False}}]
    assert condition(p, "Fetched").reason == "Fetching"


def test_the_chart_default_secret_is_optional_and_s3_gets_its_endpoint() -> None:
    settings = OperatorSettings(s3_endpoint="http://s3.local:8333", source_credentials_secret="default-creds")
    model = body(source={"uri": "s3://models/tiny"})
    kube = MemoryKube()
    _, p = blocked(kube, model, settings)
    job = kube.get("batch/v1", "Job", NAMESPACE, fetch_job_name(fetch_key(p.spec, settings), 1))
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "default-creds", "optional": True}}]
    assert container["args"][container["args"].index("--s3-endpoint") + 1] == "http://s3.local:8333"
    # A spec's own endpoint wins, and is a different request (a different fetch).
    own = body(source={"uri": "s3://models/tiny", "s3": {"endpoint": "http://other:9000"}})
    assert fetch_key(new_pass(own).spec, settings) != fetch_key(p.spec, settings)


def test_progress_then_a_record_that_a_second_model_reuses() -> None:
    kube, model = MemoryKube(), fetched_model()
    _, p = blocked(kube, model)
    job = fetch_job_name(fetch_key(p.spec, SETTINGS), 1)
    line = FetchProgress("progress", 2, 5, 1_000_000_000, 4_000_000_000, 5e8, 6.0).fields()
    kube.run_pod(NAMESPACE, job, {"fetch": json.dumps(line)})
    _, p = blocked(kube, model)
    assert "2/5 files, 1.00/4.00 GB at 500.0 MB/s, ETA 6s" in condition(p, "Fetched").message

    kube.finish_job(NAMESPACE, job, {"fetch": RESULT})
    p = new_pass(model)
    ensure_source(p, kube, SETTINGS)
    assert p.source is not None and p.source.revision == COMMIT
    assert p.source.location == f"pvc://kvant-artifacts/sources/hf/org/tiny/{COMMIT}"
    assert condition(p, "Fetched").status == "True"
    record = kube.get("v1", "ConfigMap", NAMESPACE, record_name(fetch_key(p.spec, SETTINGS)))
    assert record is not None and "ownerReferences" not in record["metadata"], "the record outlives models"

    other = fetched_model(name="tiny-2")
    created = len(kube.created)
    q = new_pass(other)
    ensure_source(q, kube, SETTINGS)
    assert q.source == p.source and len(kube.created) == created, "the same request fetches once"


def test_the_fetched_folder_feeds_the_jobs_and_its_revision_keys_the_artifact() -> None:
    kube, model = MemoryKube(), fetched_model()
    _, p = blocked(kube, model)
    kube.finish_job(NAMESPACE, fetch_job_name(fetch_key(p.spec, SETTINGS), 1), {"fetch": RESULT})
    p = new_pass(model)
    ensure_source(p, kube, SETTINGS)
    plan = jobs.plan_job(p.body, p.spec, SETTINGS, p.source)
    volume = plan["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "kvant-artifacts", "readOnly": True}
    assert (
        f"/source/sources/hf/org/tiny/{COMMIT}" in plan["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    moved = p.source.model_copy(update={"revision": "f" * 40})  # type: ignore[union-attr]
    assert artifact_key(p.spec, p.source) != artifact_key(p.spec, moved)
    with pytest.raises(ValueError, match="needs the fetch's result"):
        artifact_key(p.spec)


def test_a_failed_fetch_is_degraded_with_the_cause_then_retried_after_a_backoff() -> None:
    kube, model = MemoryKube(), fetched_model()
    _, p = blocked(kube, model)
    key = fetch_key(p.spec, SETTINGS)
    cause = json.dumps({"event": "error", "kind": "auth", "message": "hf://org/tiny: access denied (401)"})
    kube.finish_job(NAMESPACE, fetch_job_name(key, 1), {"fetch": cause}, failed="fetch")
    phase, p = blocked(kube, model)
    degraded = condition(p, "Degraded")
    assert (
        phase is Phase.FETCHING
        and degraded.reason == "FetchFailed"
        and "access denied (401)" in degraded.message
    )
    assert kube.jobs(NAMESPACE) == [fetch_job_name(key, 1)], "no retry before the backoff"
    blocked(kube, model, now=NOW + timedelta(seconds=11))
    assert kube.jobs(NAMESPACE) == [fetch_job_name(key, 1), fetch_job_name(key, 2)]


def test_a_model_keeps_the_revision_it_was_fetched_at() -> None:
    kube, model = MemoryKube(), fetched_model()
    pinned = {
        "uri": "hf://org/tiny",
        "revision": "9" * 40,
        "location": "pvc://kvant-artifacts/sources/hf/org/tiny/" + "9" * 40,
        "digest": "sha256:" + "cd" * 32,
    }
    p = new_pass(model)
    p.source = SourceStatus.model_validate(pinned)  # as the reconciler reads status.source
    ensure_source(p, kube, SETTINGS)
    assert p.source.revision == "9" * 40 and kube.created == []
