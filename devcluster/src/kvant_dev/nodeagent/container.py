"""One container as a local process: its argv, env and volume mounts, with restart bookkeeping."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvant_dev.nodeagent.fieldrefs import expand
from kvant_dev.nodeagent.images import LocalImage
from kvant_dev.nodeagent.probes import ProbeState
from kvant_dev.process import ManagedProcess

Obj = dict[str, Any]
_BACKOFF_START, _BACKOFF_MAX, _BACKOFF_RESET = 1.0, 30.0, 60.0


def rfc3339(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    spec: Obj
    image: LocalImage
    log_dir: Path
    restart_count: int = 0
    process: ManagedProcess | None = None
    started_at: float = 0.0
    finished: Obj | None = None  # the `terminated` state of the last run
    last_state: Obj = field(default_factory=dict)
    next_start: float = 0.0
    backoff: float = _BACKOFF_START
    startup: ProbeState | None = None
    readiness: ProbeState | None = None
    liveness: ProbeState | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def argv(self, env: dict[str, str]) -> list[str]:
        command = self.spec.get("command") or self.image.entrypoint
        args = self.spec.get("args") or []
        return [expand(str(part), env) for part in [*command, *args]]

    def start(self, env: dict[str, str], isolation: list[str], cwd: Path, tied: bool) -> None:
        """Starts the container's command behind `isolation`, the argv prefix of its namespaces."""
        argv = isolation + self.argv(env)
        log_path = self.log_dir / f"{self.name}.{self.restart_count}.log"
        self.process = ManagedProcess(self.name, argv, log_path, env=env, cwd=cwd, tied_to_parent=tied)
        self.started_at, self.finished = time.time(), None
        now = time.monotonic()
        self.startup = ProbeState(self.spec["startupProbe"], now) if "startupProbe" in self.spec else None
        self.readiness = (
            ProbeState(self.spec["readinessProbe"], now) if "readinessProbe" in self.spec else None
        )
        self.liveness = ProbeState(self.spec["livenessProbe"], now) if "livenessProbe" in self.spec else None

    def poll_exit(self) -> int | None:
        """Record the exit of a process that has ended; returns its exit code once."""
        if self.process is None or self.process.running():
            return None
        code = self.process.popen.returncode
        self._record_exit(code, "Completed" if code == 0 else "Error")
        return code

    def kill(self, grace_seconds: float, reason: str) -> None:
        if self.process is not None and self.process.running():
            code = self.process.stop(grace_seconds)
            self._record_exit(code if code is not None else 137, reason)

    def schedule_restart(self) -> None:
        ran_for = time.time() - self.started_at
        self.backoff = _BACKOFF_START if ran_for > _BACKOFF_RESET else min(self.backoff * 2, _BACKOFF_MAX)
        self.next_start = time.monotonic() + self.backoff
        self.last_state = {"terminated": self.finished} if self.finished else {}
        self.restart_count += 1
        self.process, self.finished = None, None

    def step_probes(self, pod_ip: str) -> str | None:
        """Advance probes; returns a reason when the container must be restarted."""
        if self.startup is not None and not self.startup.passed:
            self.startup.step(self.spec, pod_ip)
            return "StartupProbeFailed" if self.startup.failed_out else None
        if self.liveness is not None:
            self.liveness.step(self.spec, pod_ip)
            if self.liveness.failed_out:
                return "LivenessProbeFailed"
        if self.readiness is not None:
            self.readiness.step(self.spec, pod_ip)
        return None

    @property
    def ready(self) -> bool:
        running = self.process is not None and self.process.running()
        started = self.startup is None or self.startup.passed
        return running and started and (self.readiness is None or self.readiness.passed)

    def status(self) -> Obj:
        running = self.process is not None and self.process.running()
        state: Obj
        if running:
            state = {"running": {"startedAt": rfc3339(self.started_at)}}
        elif self.finished is not None:
            state = {"terminated": self.finished}
        elif self.restart_count:
            state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {self.backoff:.0f}s restarting",
                }
            }
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        return {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": f"kvant-local://{self.image.name}",
            "containerID": f"kvant-local://{self.process.pid}" if self.process else "",
            "ready": self.ready,
            "started": running and (self.startup is None or self.startup.passed),
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state,
        }

    def _record_exit(self, code: int, reason: str) -> None:
        self.finished = {
            "exitCode": code if code >= 0 else 128 - code,  # Popen reports signals as -N
            "reason": reason,
            "startedAt": rfc3339(self.started_at),
            "finishedAt": rfc3339(),
        }
