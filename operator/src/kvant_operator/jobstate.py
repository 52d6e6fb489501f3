"""What a Job is doing, read from its status and its pods: running, done (with a result), or failed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from kvant_contracts.kube_object import Obj
from kvant_operator.kube_door import KubeDoor

_LOG_TAIL = 20


class JobPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class JobState:
    phase: JobPhase
    finished_at: datetime | None = None
    detail: str = ""  # failure reason and log tail, for a person


def job_state(job: Obj) -> JobState:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        when = _time(condition.get("lastTransitionTime"))
        if condition["type"] == "Complete":
            return JobState(JobPhase.SUCCEEDED, when)
        if condition["type"] == "Failed":
            return JobState(JobPhase.FAILED, when, condition.get("message") or condition.get("reason", ""))
    return JobState(JobPhase.RUNNING)


def job_pods(kube: KubeDoor, job: Obj) -> list[Obj]:
    meta = job["metadata"]
    pods = kube.list("v1", "Pod", meta["namespace"], f"job-name={meta['name']}")
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")


def last_pod_log(kube: KubeDoor, job: Obj, container: str, tail_lines: int | None = None) -> str:
    """The log of `container` in the Job's newest pod (the one whose result counts)."""
    pods = job_pods(kube, job)
    if not pods:
        return ""
    meta = pods[-1]["metadata"]
    return kube.pod_log(meta["namespace"], meta["name"], container, tail_lines)


def failure_detail(kube: KubeDoor, job: Obj) -> str:
    """Which container failed, how, and the end of its log."""
    for pod in reversed(job_pods(kube, job)):
        status = pod.get("status") or {}
        for container in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            terminated = (container.get("state") or {}).get("terminated") or {}
            if terminated.get("exitCode"):
                tail = kube.pod_log(
                    pod["metadata"]["namespace"], pod["metadata"]["name"], container["name"], _LOG_TAIL
                ).strip()
                head = f"container {container['name']} exited {terminated['exitCode']}"
                return f"{head}; last log lines:\n{tail}" if tail else head
    return ""


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def ensure_job(kube: KubeDoor, job: Obj) -> Obj:
    """The live Job of this deterministic name, creating it from `job` when there is none yet."""
    meta = job["metadata"]
    live = kube.get("batch/v1", "Job", meta["namespace"], meta["name"])
    return live or kube.create(job) or job
