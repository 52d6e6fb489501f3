"""The artifact step: convert (and calibrate) the source once per recipe, with retries, and publish it.

An artifact is made by attempts. Each attempt is [a shards Job (distributed conversion) →] an
artifact Job, named by key and attempt, so a restarted operator finds the attempt in flight. A failed
Job is kept (its logs are the evidence) and the next attempt starts after an exponential backoff.
The artifact record ConfigMap marks the artifact as published.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kvant_contracts.backoff import delay as retry_delay
from kvant_contracts.job_lines import ArtifactResult, ConvertProgress
from kvant_contracts.kube_object import Obj
from kvant_contracts.kv_scale_delivery import delivery, describe
from kvant_contracts.weight_formats import converted_formats, weight_format
from kvant_operator import object_keys
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.spec import KvScales, QuantizedModelSpec
from kvant_operator.api.status import ArtifactStatus, Phase
from kvant_operator.artifact_recipe import (
    artifact_key,
    artifact_uri,
    needs_artifact,
    needs_calibration,
    needs_conversion,
)
from kvant_operator.jobstate import JobPhase, failure_detail, job_pods, job_state, last_pod_log
from kvant_operator.kube_door import KubeDoor
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import jobs
from kvant_operator.render.artifact_record import artifact_record, read_record, record_name
from kvant_operator.render.meta import owner_reference
from kvant_operator.settings import OperatorSettings


def ensure_artifact(p: Pass, kube: KubeDoor, settings: OperatorSettings) -> None:
    if not needs_artifact(p.spec):
        # A fetched source is served from its folder, checked against the digest it was fetched with.
        fetched = p.source
        p.artifact = (
            ArtifactStatus(uri=fetched.location, digest=fetched.digest, bytes=fetched.bytes)
            if fetched is not None
            else ArtifactStatus(uri=p.spec.source.uri)
        )
        p.condition(
            ConditionType.CONVERTED, True, "NotRequired", f"serving the source as {p.spec.weights.format}"
        )
        p.condition(ConditionType.CALIBRATED, True, "NotRequired", no_calibration_reason(p.spec))
        kv_scales_condition(p)
        return
    if not needs_conversion(p.spec):
        raise p.fail(
            "CalibrationNeedsConversion",
            "spec.kvCache.scales: calibrate writes scales into a converted artifact, and "
            f"spec.weights.format {p.spec.weights.format} converts nothing: use a format Kvant converts "
            f"to ({', '.join(converted_formats())}), or "
            "scales: checkpoint (scales already in the source) or unit",
            "fix the spec; see Degraded",
        )
    key = artifact_key(p.spec, p.source)
    if p.artifact is not None and p.artifact.uri == artifact_uri(p.spec, settings, key) and p.artifact.digest:
        return
    record = kube.get("v1", "ConfigMap", p.namespace, record_name(key))
    if record is None:
        record = Attempts(p, kube, settings, key).drive()
    p.artifact = read_record(record)
    p.condition(
        ConditionType.CONVERTED, True, "ArtifactReady", f"artifact {p.artifact.uri} ({p.artifact.digest})"
    )
    if needs_calibration(p.spec):
        p.condition(
            ConditionType.CALIBRATED, True, "ScalesCalibrated", "per-layer FP8 KV scales are in the artifact"
        )
    else:
        p.condition(ConditionType.CALIBRATED, True, "NotRequired", no_calibration_reason(p.spec))
    kv_scales_condition(p)
    p.events.append(
        ("Normal", "ArtifactReady", f"artifact {p.artifact.uri} is published ({p.artifact.digest})")
    )


def kv_scales_condition(p: Pass) -> None:
    """KVScales: how SGLang gets the FP8 KV scales of the published artifact (FP8 KV caches only)."""
    kv = p.spec.kv_cache
    if not kv.dtype.is_fp8:
        return
    if kv.scales is KvScales.UNIT:
        p.condition(
            ConditionType.KV_SCALES, True, "UnitScales", "scale 1.0, as spec.kvCache.scales: unit asks"
        )
    elif kv.scales is KvScales.CHECKPOINT:
        p.condition(ConditionType.KV_SCALES, True, "FromCheckpoint", "the scales the checkpoint carries")
    elif p.plan is not None and p.plan.architecture:
        found = delivery(p.plan.architecture, kv.dtype.value)  # loadable: the plan step refuses the rest
        p.condition(
            ConditionType.KV_SCALES, True, f"Calibrated{_PATH_REASONS[found.paths[0]]}", describe(found)
        )


_PATH_REASONS = {"remap": "RemappedNames", "exact": "ExactNames", "json": "QuantParamJSON"}


def no_calibration_reason(spec: QuantizedModelSpec) -> str:
    if not spec.kv_cache.dtype.is_fp8:
        return f"the KV cache is {spec.kv_cache.dtype}; no FP8 scales are needed"
    return f"spec.kvCache.scales is {spec.kv_cache.scales}: no calibration run"


class Attempts:
    """The attempts of one artifact key, driven one reconcile at a time from what the cluster holds."""

    def __init__(self, p: Pass, kube: KubeDoor, settings: OperatorSettings, key: str) -> None:
        assert p.plan is not None
        self.p, self.kube, self.settings, self.key = p, kube, settings, key
        self.plan = p.plan  # the plan the conversion builds
        self.label = weight_format(p.spec.weights.format.value).label
        self.workers = (
            jobs.conversion_workers(p.body, p.spec, p.plan.source_bytes, settings)
            if needs_conversion(p.spec)
            else 1
        )

    def drive(self) -> Obj:
        """The published record, or Blocked while an attempt runs, fails or waits for its backoff."""
        p = self.p
        stage = self._current_stage()
        if stage is None:
            self._start(1)
        assert stage is not None
        self.kube.add_owner("batch/v1", "Job", stage, owner_reference(p.body, controller=False))
        attempt = job_attempt(stage)
        state = job_state(stage)
        if state.phase is JobPhase.RUNNING:
            self._running(stage)
        if state.phase is JobPhase.FAILED:
            self._failed(stage, state.finished_at)
        if stage["metadata"]["name"] == jobs.shards_job_name(self.key, attempt):
            job = jobs.artifact_job(
                [p.body],
                p.spec,
                self.settings,
                self.key,
                attempt=attempt,
                workers=self.workers,
                fetched=p.source,
                plan=self.plan,
            )
            self._create(job)
            self._progress("Finalizing", f"all {self.workers} conversion workers finished; finalizing")
            raise Blocked(Phase.CONVERTING)
        return self._publish(stage)

    def _current_stage(self) -> Obj | None:
        """The newest Job of the newest attempt: the artifact Job, else its shards Job."""
        selector = f"{object_keys.ARTIFACT_LABEL}={self.key},app.kubernetes.io/component=artifact"
        found = self.kube.list("batch/v1", "Job", self.p.namespace, selector)
        live = [j for j in found if not j["metadata"].get("deletionTimestamp")]
        return max(
            live, key=lambda j: (job_attempt(j), not j["metadata"]["name"].endswith("-shards")), default=None
        )

    def _start(self, attempt: int) -> None:
        p = self.p
        if self.workers > 1:
            first = jobs.shards_job(
                [p.body],
                p.spec,
                self.settings,
                self.key,
                workers=self.workers,
                attempt=attempt,
                plan=self.plan,
                fetched=p.source,
            )
        else:
            first = jobs.artifact_job(
                [p.body],
                p.spec,
                self.settings,
                self.key,
                attempt=attempt,
                fetched=p.source,
                plan=self.plan,
            )
        self._create(first)
        self._progress("Starting", f"job {first['metadata']['name']} is starting ({self.workers} worker(s))")
        raise Blocked(Phase.CONVERTING)

    def _create(self, job: Obj) -> None:
        if self.kube.create(job) is not None:
            self.p.events.append(("Normal", "ArtifactJobCreated", f"job {job['metadata']['name']}"))

    def _running(self, job: Obj) -> None:
        p = self.p
        spec = job.get("spec") or {}
        if spec.get("completionMode") == "Indexed":
            done = (job.get("status") or {}).get("succeeded", 0)
            self._progress(
                "Converting", f"converting to {self.label} on {spec['completions']} workers: {done} finished"
            )
            raise Blocked(Phase.CONVERTING)
        pods = job_pods(self.kube, job)
        step, message = "convert", "waiting for the conversion pod"
        if pods:
            pod = pods[-1]
            step = running_step(pod) or step
            tail = self.kube.pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"], step, 20)
            message = progress_message(step, ConvertProgress.from_log(tail), self.label)
        if step == "calibrate":
            finished = f"{self.label} conversion finished; calibrating"
            p.condition(ConditionType.CONVERTED, True, "Converted", finished)
            p.condition(ConditionType.CALIBRATED, False, "Calibrating", message)
            p.condition(ConditionType.PROGRESSING, True, "Calibrating", message)
            raise Blocked(Phase.CALIBRATING)
        self._progress("Converting", message)
        raise Blocked(Phase.CONVERTING)

    def _progress(self, reason: str, message: str) -> None:
        p = self.p
        if needs_conversion(p.spec):
            p.condition(ConditionType.CONVERTED, False, reason, message)
        p.condition(ConditionType.CALIBRATED, False, "Waiting", "calibration runs after conversion")
        p.condition(ConditionType.PROGRESSING, True, reason, message)

    def _failed(self, job: Obj, finished_at: datetime | None) -> None:
        p = self.p
        attempt = job_attempt(job)
        retry_in = backoff(attempt)
        detail = failure_detail(self.kube, job) or "the job failed"
        message = f"attempt {attempt} ({job['metadata']['name']}) failed: {detail}"
        p.condition(ConditionType.CONVERTED, False, "ConversionFailed", message)
        p.condition(
            ConditionType.DEGRADED, True, "ConversionFailed", f"{message}\nretrying in {retry_in.seconds}s"
        )
        if finished_at is not None and p.now - finished_at >= retry_in:
            p.events.append(
                ("Warning", "ConversionRetry", f"{message[:300]} — retrying (attempt {attempt + 1})")
            )
            self._start(attempt + 1)
        raise Blocked(Phase.CONVERTING if p.artifact is None else Phase.DEGRADED)

    def _publish(self, job: Obj) -> Obj:
        p = self.p
        last = "calibrate" if needs_calibration(p.spec) else "convert"
        result = ArtifactResult.from_log(last_pod_log(self.kube, job, last, 50))
        if result is None:  # a runtime image that does not speak this contract: nothing to record
            raise p.fail(
                "ArtifactResultMissing",
                f"job {job['metadata']['name']} succeeded but its {last} container printed no artifact "
                "result line; is the runtime image the operator's version?",
                "fix the runtime image; see Degraded",
            )
        artifact = ArtifactStatus(
            uri=artifact_uri(p.spec, self.settings, self.key),
            digest=result.digest,
            bytes=result.bytes,
            source_bytes=result.sourceBytes,
        )
        record = artifact_record(p.body, self.key, artifact)
        self.kube.create(record)
        return record


def job_attempt(job: Obj) -> int:
    return int((job["metadata"].get("annotations") or {}).get(object_keys.ATTEMPT_ANNOTATION, "1"))


def backoff(attempt: int) -> timedelta:
    """How long a failed Job's retry waits: 10 s, doubling, at most 10 minutes."""
    return timedelta(seconds=retry_delay(attempt, 10.0, 600.0))


def running_step(pod: Obj) -> str | None:
    """The step running now or, between steps, the last one that started (steps run in order)."""
    status = pod.get("status") or {}
    started = [
        str(c["name"])
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        if {"running", "terminated"} & set(c.get("state") or {})
    ]
    return started[-1] if started else None


def progress_message(step: str, line: ConvertProgress | None, label: str) -> str:
    if step == "calibrate":
        return "calibrating FP8 KV scales layer by layer"
    if line is None or not line.shardsTotal:
        return f"converting to {label}"
    gb = 1e9
    eta = f", ETA {line.etaSeconds:.0f}s" if line.etaSeconds is not None else ""
    return (
        f"converting to {label}: {line.shardsDone}/{line.shardsTotal} shards, "
        f"{line.bytesDone / gb:.2f}/{line.bytesTotal / gb:.2f} GB{eta}"
    )
