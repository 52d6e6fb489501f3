"""One reconcile of one QuantizedModel: plan → artifact → serving, then the status that says so.

The steps are idempotent and keep their state in the cluster (Jobs with deterministic names, the
artifact records, status.plan), so an operator restart resumes exactly where the last one stopped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from kvant_operator.api.lifecycle import ConditionType, set_condition
from kvant_operator.api.resource import QuantizedModel
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import ArtifactStatus, Condition, ConditionStatus, Phase, PlanStatus
from kvant_operator.artifact import (
    UnsupportedSourceError,
    artifact_key,
    artifact_location,
    artifact_uri,
    digest,
    needs_artifact,
    needs_calibration,
    needs_conversion,
    source_location,
)
from kvant_operator.jobstate import (
    JobPhase,
    failure_detail,
    job_pods,
    job_state,
    last_json_line,
    last_pod_log,
)
from kvant_operator.kube import Kube
from kvant_operator.planner.plan import CapacityPlan
from kvant_operator.protection.loop import ProtectionResult
from kvant_operator.render import jobs
from kvant_operator.render.meta import model_labels, owner_reference, with_applied_hash
from kvant_operator.render.serving import (
    ServingInputs,
    roles,
    serving_objects,
    serving_selector,
    workload_name,
)
from kvant_operator.settings import OperatorSettings

Obj = dict[str, Any]
T, F = ConditionStatus.TRUE, ConditionStatus.FALSE
RECORD_PREFIX = "kvant-artifact-"
log = logging.getLogger("kvant.operator.reconcile")
Protection = ProtectionResult | None


class Blocked(Exception):
    """A step cannot finish yet; carries the conditions and phase that say why."""

    def __init__(self, phase: Phase, busy: bool = True) -> None:
        super().__init__(phase.value)
        self.phase, self.busy = phase, busy


@dataclass
class Outcome:
    status: Obj
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    busy: bool = False


@dataclass
class ConditionLog:
    """The conditions as one pass rewrites them, remembering which summary conditions it set."""

    conditions: list[Condition]
    generation: int
    now: datetime
    written: set[ConditionType] = field(default_factory=set)

    def set(self, kind: ConditionType, ok: bool | ConditionStatus, reason: str, message: str) -> None:
        status = ok if isinstance(ok, ConditionStatus) else (T if ok else F)
        self.conditions = set_condition(
            self.conditions,
            kind,
            status,
            reason=reason,
            message=message,
            generation=self.generation,
            now=self.now,
        )
        self.written.add(kind)


@dataclass
class Pass:
    """The state of one reconcile pass as it builds the new status."""

    body: Obj
    spec: QuantizedModelSpec
    log: ConditionLog
    plan: PlanStatus | None = None
    artifact: ArtifactStatus | None = None
    protection: ProtectionResult | None = None
    resync: bool = True  # apply every serving object; False: only read the rollout (settled, unchanged)
    replicas: tuple[int, int] | None = None  # (existing, ready) serving replicas
    events: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def now(self) -> datetime:
        return self.log.now

    def condition(self, kind: ConditionType, ok: bool, reason: str, message: str) -> None:
        self.log.set(kind, ok, reason, message)


class Reconciler:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube, self.settings = kube, settings

    def reconcile(self, body: Obj, protection: Protection = None, resync: bool = True) -> Outcome:
        """`protection` is this pass's protection step, when one ran; it joins the same status write.
        `resync` False skips re-applying serving objects: the caller knows nothing changed since."""
        status = body.get("status") or {}
        generation = int(body["metadata"].get("generation", 0))
        previous = [Condition.model_validate(c) for c in status.get("conditions") or []]
        now = datetime.now(UTC).replace(microsecond=0)
        try:
            spec = QuantizedModel.model_validate(body).spec
        except ValidationError as err:
            return self._invalid(body, ConditionLog(previous, generation, now), _validation_message(err))
        p = Pass(
            body,
            spec,
            ConditionLog(previous, generation, now),
            plan=PlanStatus.model_validate(status["plan"]) if status.get("plan") else None,
            artifact=ArtifactStatus.model_validate(status["artifact"]) if status.get("artifact") else None,
            protection=protection,
            resync=resync,
        )
        try:
            self._plan(p)
            self._artifact(p)
            self._validate(p)
            phase, busy = self._serve(p)
        except Blocked as blocked:
            phase, busy = blocked.phase, blocked.busy
        except UnsupportedSourceError as err:
            p.condition(ConditionType.DEGRADED, True, "SourceUnsupported", str(err))
            phase, busy = Phase.FAILED, False
        if ConditionType.READY not in p.log.written:
            self._ready_while_blocked(p, phase)
        return self._outcome(body, p.log, phase, busy, p)

    # -- plan ---------------------------------------------------------------------------------------------

    def _plan(self, p: Pass) -> None:
        inputs = digest(jobs.plan_inputs(p.spec))
        if p.plan is not None and p.plan.inputs == inputs:
            return
        job = self._ensure_job(jobs.plan_job(p.body, p.spec, self.settings))
        state = job_state(job)
        if state.phase is JobPhase.RUNNING:
            p.condition(
                ConditionType.PROGRESSING,
                True,
                "Planning",
                "reading the checkpoint's config and tensor inventory to plan KV capacity",
            )
            raise Blocked(Phase.PENDING)
        if state.phase is JobPhase.FAILED:
            detail = failure_detail(self.kube, job) or state.detail
            p.condition(ConditionType.DEGRADED, True, "PlanFailed", f"capacity planning failed: {detail}")
            p.condition(
                ConditionType.PROGRESSING, False, "PlanFailed", "fix the source or spec; see Degraded"
            )
            raise Blocked(Phase.FAILED, busy=False)
        p.plan = self._read_plan(job, inputs)
        p.events.append(("Normal", "Planned", _plan_summary(p.plan)))

    def _read_plan(self, job: Obj, inputs: str) -> PlanStatus:
        text = last_pod_log(self.kube, job, "plan")
        plan = CapacityPlan.model_validate(json.loads(text)).to_status()
        return plan.model_copy(update={"inputs": inputs})

    # -- artifact -----------------------------------------------------------------------------------------

    def _artifact(self, p: Pass) -> None:
        if not needs_artifact(p.spec):
            source_location(p.spec)  # rejects sources pods cannot mount
            p.artifact = ArtifactStatus(uri=p.spec.source.uri)
            p.condition(
                ConditionType.CONVERTED, True, "NotRequired", f"serving the source as {p.spec.weights.format}"
            )
            p.condition(ConditionType.CALIBRATED, True, "NotRequired", _no_calibration_reason(p.spec))
            return
        if not needs_conversion(p.spec):
            p.condition(
                ConditionType.DEGRADED,
                True,
                "CalibrationNeedsConversion",
                "spec.kvCache.scales: calibrate writes scales into a converted artifact, and "
                f"spec.weights.format {p.spec.weights.format} converts nothing: use format int4, or "
                "scales: checkpoint (scales already in the source) or unit",
            )
            p.condition(
                ConditionType.PROGRESSING, False, "CalibrationNeedsConversion", "fix the spec; see Degraded"
            )
            raise Blocked(Phase.FAILED, busy=False)
        key = artifact_key(p.spec, self.settings)
        if (
            p.artifact is not None
            and p.artifact.uri == artifact_uri(p.spec, self.settings, key)
            and p.artifact.digest
        ):
            return
        record = self.kube.get("v1", "ConfigMap", p.body["metadata"]["namespace"], RECORD_PREFIX + key)
        if record is None:
            record = self._run_artifact_job(p, key)
        p.artifact = ArtifactStatus.model_validate(json.loads(record["data"]["artifact.json"]))
        p.condition(
            ConditionType.CONVERTED, True, "ArtifactReady", f"artifact {p.artifact.uri} ({p.artifact.digest})"
        )
        if needs_calibration(p.spec):
            p.condition(
                ConditionType.CALIBRATED,
                True,
                "ScalesCalibrated",
                "per-layer FP8 KV scales are in the artifact",
            )
        else:
            p.condition(ConditionType.CALIBRATED, True, "NotRequired", _no_calibration_reason(p.spec))
        p.events.append(
            ("Normal", "ArtifactReady", f"artifact {p.artifact.uri} is published ({p.artifact.digest})")
        )

    def _run_artifact_job(self, p: Pass, key: str) -> Obj:
        """Drives the attempts of one artifact: each is [shards Job (distributed) →] artifact Job."""
        assert p.plan is not None
        workers = (
            jobs.conversion_workers(p.body, p.plan.source_bytes, self.settings)
            if needs_conversion(p.spec)
            else 1
        )
        stage = self._current_stage(p, key)
        if stage is None:
            self._start_attempt(p, key, 1, workers)
        assert stage is not None
        self.kube.add_owner("batch/v1", "Job", stage, owner_reference(p.body, controller=False))
        attempt = _attempt(stage)
        state = job_state(stage)
        if state.phase is JobPhase.RUNNING:
            self._artifact_running(p, stage)
        if state.phase is JobPhase.FAILED:
            self._artifact_failed(p, stage, state.finished_at, key, workers)
        if stage["metadata"]["name"] == jobs.shards_job_name(key, attempt):
            self._create(
                p, jobs.artifact_job([p.body], p.spec, self.settings, key, attempt=attempt, workers=workers)
            )
            self._artifact_progress(p, "Finalizing", f"all {workers} conversion workers finished; finalizing")
            raise Blocked(Phase.CONVERTING)
        return self._record_artifact(p, stage, key)

    def _current_stage(self, p: Pass, key: str) -> Obj | None:
        """The newest Job of the newest attempt: the artifact Job, else its shards Job."""
        selector = f"{jobs.ARTIFACT_LABEL}={key},app.kubernetes.io/component=artifact"
        found = self.kube.list("batch/v1", "Job", p.body["metadata"]["namespace"], selector)
        live = [j for j in found if not j["metadata"].get("deletionTimestamp")]
        return max(
            live, key=lambda j: (_attempt(j), not j["metadata"]["name"].endswith("-shards")), default=None
        )

    def _start_attempt(self, p: Pass, key: str, attempt: int, workers: int) -> None:
        if workers > 1:
            first = jobs.shards_job([p.body], p.spec, self.settings, key, workers=workers, attempt=attempt)
        else:
            first = jobs.artifact_job([p.body], p.spec, self.settings, key, attempt=attempt)
        self._create(p, first)
        self._artifact_progress(
            p, "Starting", f"job {first['metadata']['name']} is starting ({workers} worker(s))"
        )
        raise Blocked(Phase.CONVERTING)

    def _create(self, p: Pass, job: Obj) -> None:
        if self.kube.create(job) is not None:
            p.events.append(("Normal", "ArtifactJobCreated", f"job {job['metadata']['name']}"))

    def _artifact_running(self, p: Pass, job: Obj) -> None:
        spec = job.get("spec") or {}
        if spec.get("completionMode") == "Indexed":
            done = (job.get("status") or {}).get("succeeded", 0)
            self._artifact_progress(
                p, "Converting", f"converting to INT4 on {spec['completions']} workers: {done} finished"
            )
            raise Blocked(Phase.CONVERTING)
        pods = job_pods(self.kube, job)
        step, message = "convert", "waiting for the conversion pod"
        if pods:
            pod = pods[-1]
            step = _running_step(pod) or step
            tail = self.kube.pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"], step, 20)
            message = _progress_message(step, last_json_line(tail, "event"))
        if step == "calibrate":
            p.condition(ConditionType.CONVERTED, True, "Converted", "INT4 conversion finished; calibrating")
            p.condition(ConditionType.CALIBRATED, False, "Calibrating", message)
            p.condition(ConditionType.PROGRESSING, True, "Calibrating", message)
            raise Blocked(Phase.CALIBRATING)
        self._artifact_progress(p, "Converting", message)
        raise Blocked(Phase.CONVERTING)

    def _artifact_progress(self, p: Pass, reason: str, message: str) -> None:
        if needs_conversion(p.spec):
            p.condition(ConditionType.CONVERTED, False, reason, message)
        p.condition(ConditionType.CALIBRATED, False, "Waiting", "calibration runs after conversion")
        p.condition(ConditionType.PROGRESSING, True, reason, message)

    def _artifact_failed(
        self, p: Pass, job: Obj, finished_at: datetime | None, key: str, workers: int
    ) -> None:
        """Keeps the failed Job (its logs are the evidence) and starts the next attempt after a backoff."""
        attempt = _attempt(job)
        retry_in = _backoff(attempt)
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
            self._start_attempt(p, key, attempt + 1, workers)
        raise Blocked(Phase.CONVERTING if p.artifact is None else Phase.DEGRADED)

    def _record_artifact(self, p: Pass, job: Obj, key: str) -> Obj:
        last = "calibrate" if needs_calibration(p.spec) else "convert"
        result = last_json_line(last_pod_log(self.kube, job, last, 50), "digest") or {}
        artifact = ArtifactStatus(
            uri=artifact_uri(p.spec, self.settings, key),
            digest=str(result.get("digest", "")),
            bytes=int(result.get("bytes", 0)),
            source_bytes=int(result.get("sourceBytes", 0)),
        )
        record = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            # No owner: the record outlives its models, so a re-created model reuses the artifact.
            "metadata": {
                "name": RECORD_PREFIX + key,
                "namespace": p.body["metadata"]["namespace"],
                "labels": {
                    **model_labels(p.body["metadata"]["name"], "artifact-record"),
                    jobs.ARTIFACT_LABEL: key,
                },
            },
            "data": {"artifact.json": artifact.model_dump_json(by_alias=True)},
        }
        self.kube.create(record)
        return record

    # -- serving ------------------------------------------------------------------------------------------

    # -- evaluation ---------------------------------------------------------------------------------------

    def _validate(self, p: Pass) -> None:
        """The accuracy gate: with blockRollout, a failing or unfinished candidate never gets serving pods."""
        evaluation = p.spec.evaluation
        if evaluation is None or not needs_artifact(p.spec):
            reason = "NotRequested" if evaluation is None else "NothingConverted"
            p.condition(ConditionType.VALIDATED, True, reason, "no evaluation gate applies")
            return
        name = jobs.eval_job_name(artifact_key(p.spec, self.settings), p.spec)
        previous = next((c for c in p.log.conditions if c.type == ConditionType.VALIDATED), None)
        if previous is not None and previous.reason in ("Passed", "GateFailed") and name in previous.message:
            p.log.written.add(ConditionType.VALIDATED)  # settled for this candidate: keep it
            self._gate(p, evaluation.block_rollout, previous.reason == "Passed", previous.message)
            return
        job = self._ensure_job(
            jobs.eval_job(p.body, p.spec, self.settings, artifact_key(p.spec, self.settings))
        )
        state = job_state(job)
        if state.phase is JobPhase.RUNNING:
            p.condition(
                ConditionType.VALIDATED,
                False,
                "Evaluating",
                f"job {name} compares the artifact with its source",
            )
            p.condition(ConditionType.PROGRESSING, True, "Evaluating", f"job {name} is running")
            if evaluation.block_rollout:
                raise Blocked(Phase.EVALUATING)
            return
        passed, message = self._eval_result(job, name, evaluation.max_kl_divergence)
        p.condition(ConditionType.VALIDATED, passed, "Passed" if passed else "GateFailed", message)
        p.events.append(
            ("Normal" if passed else "Warning", "EvaluationPassed" if passed else "EvaluationFailed", message)
        )
        self._gate(p, evaluation.block_rollout, passed, message)

    def _gate(self, p: Pass, block: bool, passed: bool, message: str) -> None:
        if not passed and block:
            p.condition(
                ConditionType.DEGRADED,
                True,
                "EvaluationFailed",
                f"the candidate failed the accuracy gate and is not rolled out (blockRollout): {message}",
            )
            p.condition(
                ConditionType.PROGRESSING, False, "EvaluationFailed", "fix the recipe or the threshold"
            )
            raise Blocked(Phase.DEGRADED, busy=False)

    def _eval_result(self, job: Obj, name: str, threshold: float) -> tuple[bool, str]:
        text = last_pod_log(self.kube, job, "eval", 50)
        result = last_json_line(text, "meanKLDivergence") or {}
        if not result:
            return False, f"job {name} gave no result: {failure_detail(self.kube, job)}"
        measured = (
            f"meanKLDivergence {result['meanKLDivergence']:.4g} (maxKLDivergence {threshold:g}), "
            f"top-1 agreement {result.get('top1Agreement', 0):.3f}"
        )
        if result.get("passed"):
            return True, f"job {name}: {measured}"
        return False, f"job {name}: {result.get('failure') or measured}"

    # -- serving ------------------------------------------------------------------------------------------

    def _serve(self, p: Pass) -> tuple[Phase, bool]:
        assert p.plan is not None and p.artifact is not None
        objects = self._serving_objects(p)
        if not p.resync:  # settled and unchanged: only protection may have moved the limits
            objects = [o for o in objects if o["kind"] == "ConfigMap"] if p.protection is not None else []
        for obj in objects:
            self.kube.ensure(with_applied_hash(obj))
        return self._rollout_status(p)

    def _serving_objects(self, p: Pass) -> list[Obj]:
        assert p.plan is not None and p.artifact is not None
        status = p.body.get("status") or {}
        if p.protection is not None:
            effective = p.protection.effective_concurrency
        else:
            effective = (status.get("protection") or {}).get("effectiveConcurrency")
        if needs_artifact(p.spec):
            location = artifact_location(p.spec, self.settings, artifact_key(p.spec, self.settings))
        else:
            location = source_location(p.spec)
        inputs = ServingInputs(p.body, p.spec, p.plan, location, p.artifact.digest, self.settings)
        return serving_objects(inputs, effective)

    def _rollout_status(self, p: Pass) -> tuple[Phase, bool]:
        namespace, model = p.body["metadata"]["namespace"], p.body["metadata"]["name"]
        pending, existing, ready = [], 0, 0
        for role in roles(p.spec):
            live = self.kube.get("apps/v1", "Deployment", namespace, workload_name(model, role)) or {}
            existing += (live.get("status") or {}).get("replicas", 0)
            ready += (live.get("status") or {}).get("readyReplicas", 0)
            waiting = _rollout_pending(live, role.replicas)
            if waiting:
                pending.append(f"{role.name}: {waiting}")
        p.replicas = (existing, ready)
        if pending:
            message = "; ".join(pending)
            p.condition(ConditionType.READY, False, "RollingOut", message)
            p.condition(ConditionType.PROGRESSING, True, "RollingOut", message)
            return Phase.DEPLOYING, True
        p.condition(ConditionType.READY, True, "Serving", "all serving replicas are ready behind the gate")
        p.condition(ConditionType.PROGRESSING, False, "Settled", "the current generation is fully rolled out")
        return Phase.READY, False

    # -- status -------------------------------------------------------------------------------------------

    def _ensure_job(self, job: Obj) -> Obj:
        meta = job["metadata"]
        live = self.kube.get("batch/v1", "Job", meta["namespace"], meta["name"])
        return live or self.kube.create(job) or job

    def _ready_while_blocked(self, p: Pass, phase: Phase) -> None:
        """While a new generation converts or plans, the previous Deployment may still serve."""
        namespace, model = p.body["metadata"]["namespace"], p.body["metadata"]["name"]
        serving = [
            self.kube.get("apps/v1", "Deployment", namespace, workload_name(model, r)) for r in roles(p.spec)
        ]
        if all(d and not _rollout_pending(d, d["spec"].get("replicas", 0)) for d in serving):
            p.condition(
                ConditionType.READY,
                True,
                "ServingPreviousGeneration",
                f"the new generation is {phase.value}; the previous one keeps serving",
            )
        else:
            p.condition(ConditionType.READY, False, phase.value, f"not serving yet: phase {phase.value}")

    def _invalid(self, body: Obj, log_: ConditionLog, message: str) -> Outcome:
        log_.set(ConditionType.DEGRADED, True, "InvalidSpec", message)
        log_.set(ConditionType.PROGRESSING, False, "InvalidSpec", "fix the spec; see Degraded")
        log_.set(ConditionType.READY, False, "InvalidSpec", "the spec is invalid")
        return self._outcome(body, log_, Phase.FAILED, False, None)

    def _outcome(self, body: Obj, log_: ConditionLog, phase: Phase, busy: bool, p: Pass | None) -> Outcome:
        if ConditionType.DEGRADED not in log_.written:
            log_.set(ConditionType.DEGRADED, False, "AsExpected", "no failures")
        if p is not None and p.protection is not None:
            log_.set(ConditionType.CACHE_PROTECTED, *p.protection.condition)
        status: Obj = {
            "observedGeneration": log_.generation,
            "phase": phase.value,
            "conditions": [c.model_dump(mode="json", by_alias=True) for c in log_.conditions],
        }
        events = p.events if p else []
        if p is not None and p.protection is not None:
            status["protection"] = p.protection.status  # None values delete stale keys (merge patch)
            events += p.protection.events
        if p is not None and p.plan is not None:
            status["plan"] = p.plan.model_dump(mode="json", by_alias=True, exclude_none=True)
        if p is not None and p.artifact is not None:
            status["artifact"] = p.artifact.model_dump(mode="json", by_alias=True, exclude_none=True)
        if p is not None and p.replicas is not None:
            status["replicas"], status["readyReplicas"] = p.replicas
            status["selector"] = serving_selector(body["metadata"]["name"])
        if phase.value != (body.get("status") or {}).get("phase"):
            kind = "Warning" if phase in (Phase.FAILED, Phase.DEGRADED) else "Normal"
            events.append((kind, f"Phase{phase.value}", _phase_message(log_, phase)))
        return Outcome(status, events, busy)


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(x) for x in e["loc"])
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _no_calibration_reason(spec: QuantizedModelSpec) -> str:
    if not spec.kv_cache.dtype.is_fp8:
        return f"the KV cache is {spec.kv_cache.dtype}; no FP8 scales are needed"
    return f"spec.kvCache.scales is {spec.kv_cache.scales}: no calibration run"


def _attempt(job: Obj) -> int:
    return int((job["metadata"].get("annotations") or {}).get(jobs.ATTEMPT_ANNOTATION, "1"))


def _backoff(attempt: int) -> timedelta:
    return timedelta(seconds=min(600, 10 * 2 ** (attempt - 1)))


def _running_step(pod: Obj) -> str | None:
    """The step running now or, between steps, the last one that started (steps run in order)."""
    status = pod.get("status") or {}
    started = [
        str(c["name"])
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        if {"running", "terminated"} & set(c.get("state") or {})
    ]
    return started[-1] if started else None


def _progress_message(step: str, record: Obj | None) -> str:
    if step == "calibrate":
        return "calibrating FP8 KV scales layer by layer"
    if not record or not record.get("shardsTotal"):
        return "converting to INT4"
    gb = 1e9
    eta = f", ETA {record['etaSeconds']:.0f}s" if record.get("etaSeconds") is not None else ""
    return (
        f"converting to INT4: {record['shardsDone']}/{record['shardsTotal']} shards, "
        f"{record['bytesDone'] / gb:.2f}/{record['bytesTotal'] / gb:.2f} GB{eta}"
    )


def _rollout_pending(live: Obj, replicas: int) -> str:
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


def _plan_summary(plan: PlanStatus) -> str:
    concurrency = ", ".join(f"{k} tokens: {v}" for k, v in plan.max_concurrency.items())
    return (
        f"KV {plan.kv_cache_dtype}: {plan.kv_bytes_per_token_per_gpu} B/token/GPU, "
        f"{plan.kv_tokens_per_replica} tokens per replica; concurrency at {concurrency}"
    )


def _phase_message(log_: ConditionLog, phase: Phase) -> str:
    for condition in log_.conditions:
        if condition.status is T and condition.type == ConditionType.DEGRADED:
            return condition.message[:500]
    return f"phase is now {phase.value}"
