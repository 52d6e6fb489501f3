"""The fetch step: a fetched source (hf://, s3://) is downloaded once per request, by attempts, before
anything reads it.

The model's status.source pins the revision the fetch resolved to (a branch that moves later changes
nothing served), and the record ConfigMap, which outlives models, lets every later model with the same
request reuse the folder. A failed attempt keeps its Job (the logs are the evidence) and the next one
starts after a backoff, so a Secret fixed meanwhile is picked up without anyone deleting anything.
"""

from __future__ import annotations

from kvant_contracts.job_lines import FetchProgress, SourceResult
from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.status import Phase, SourceStatus
from kvant_operator.jobstate import JobPhase, failure_detail, job_pods, job_state, last_pod_log
from kvant_operator.kube_door import KubeDoor
from kvant_operator.object_keys import SOURCE_LABEL
from kvant_operator.reconcile.artifact_step import backoff, job_attempt
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import fetch_job as render
from kvant_operator.render.meta import owner_reference
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import is_fetched


def ensure_source(p: Pass, kube: KubeDoor, settings: OperatorSettings) -> None:
    uri = p.spec.source.uri
    if not is_fetched(uri):
        p.source = None
        return
    if p.source is not None and p.source.uri == uri and p.source.digest:
        return  # pinned: the model keeps the revision it was fetched at
    key = render.fetch_key(p.spec, settings)
    record = kube.get("v1", "ConfigMap", p.namespace, render.record_name(key))
    if record is None:
        record = _drive(p, kube, settings, key)
    p.source = render.read_source_record(record)
    p.condition(
        ConditionType.FETCHED,
        True,
        "Fetched",
        f"{uri} at {p.source.revision[:12]}: {p.source.files} files, {p.source.bytes / 1e9:.2f} GB, "
        f"verified ({p.source.digest[:19]}) in {p.source.location}",
    )
    p.events.append(("Normal", "SourceFetched", f"{uri} at revision {p.source.revision}"))


def _drive(p: Pass, kube: KubeDoor, settings: OperatorSettings, key: str) -> Obj:
    """The published record, or Blocked while an attempt runs, fails or waits for its backoff."""
    selector = f"{SOURCE_LABEL}={key},app.kubernetes.io/component=fetch"
    live = [
        j
        for j in kube.list("batch/v1", "Job", p.namespace, selector)
        if not j["metadata"].get("deletionTimestamp")
    ]
    job = max(live, key=job_attempt, default=None)
    if job is None:
        job = _start(p, kube, settings, key, 1)
    kube.add_owner("batch/v1", "Job", job, owner_reference(p.body, controller=False))
    state = job_state(job)
    if state.phase is JobPhase.RUNNING:
        message = _progress(kube, job, p.spec.source.uri)
        p.condition(ConditionType.FETCHED, False, "Fetching", message)
        p.condition(ConditionType.PROGRESSING, True, "Fetching", message)
        raise Blocked(Phase.FETCHING)
    if state.phase is JobPhase.FAILED:
        attempt = job_attempt(job)
        retry_in = backoff(attempt)
        detail = failure_detail(kube, job) or "the job failed"
        message = (
            f"fetching {p.spec.source.uri}: attempt {attempt} ({job['metadata']['name']}) failed: {detail}"
        )
        p.condition(ConditionType.FETCHED, False, "FetchFailed", message)
        p.condition(
            ConditionType.DEGRADED, True, "FetchFailed", f"{message}\nretrying in {retry_in.seconds}s"
        )
        p.condition(
            ConditionType.PROGRESSING, False, "FetchFailed", "fix the source or its credentials; see Degraded"
        )
        if state.finished_at is not None and p.now - state.finished_at >= retry_in:
            p.events.append(("Warning", "FetchRetry", f"{message[:300]} — retrying (attempt {attempt + 1})"))
            _start(p, kube, settings, key, attempt + 1)
        raise Blocked(Phase.FETCHING, busy=False)
    result = SourceResult.from_log(last_pod_log(kube, job, "fetch", 20))
    if result is None:
        raise p.fail(
            "FetchResultMissing",
            f"job {job['metadata']['name']} succeeded but printed no fetch result line; "
            "is the runtime image the operator's version?",
            "fix the runtime image; see Degraded",
        )
    source = SourceStatus(
        uri=p.spec.source.uri,
        revision=result.revision,
        location=render.source_location(settings, result.path),
        digest=result.sourceDigest,
        bytes=result.bytes,
        files=result.files,
    )
    record = render.source_record(p.body, key, source)
    kube.create(record)
    return record


def _start(p: Pass, kube: KubeDoor, settings: OperatorSettings, key: str, attempt: int) -> Obj:
    job = render.fetch_job([p.body], p.spec, settings, key, attempt)
    created = kube.create(job)
    if created is not None:
        p.events.append(("Normal", "FetchJobCreated", f"job {job['metadata']['name']}"))
    return created or kube.get("batch/v1", "Job", p.namespace, job["metadata"]["name"]) or job


def _progress(kube: KubeDoor, job: Obj, uri: str) -> str:
    pods = job_pods(kube, job)
    if not pods:
        return f"fetching {uri}: waiting for the fetch pod"
    meta = pods[-1]["metadata"]
    line = FetchProgress.from_log(kube.pod_log(meta["namespace"], meta["name"], "fetch", 5))
    if line is None:
        return f"fetching {uri}: resolving the revision"
    eta = f", ETA {line.etaSeconds:.0f}s" if line.etaSeconds is not None else ""
    return (
        f"fetching {uri}: {line.filesDone}/{line.filesTotal} files, "
        f"{line.bytesDone / 1e9:.2f}/{line.bytesTotal / 1e9:.2f} GB "
        f"at {line.bytesPerSecond / 1e6:.1f} MB/s{eta}"
    )
