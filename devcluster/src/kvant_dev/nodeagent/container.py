"""One container as a local process: its argv, env and volume mounts, with restart bookkeeping.

Stopping one is the kubelet's: its preStop hook first (an exec inside the container, or a sleep), then
SIGTERM, then SIGKILL, all within the grace period; `stop_all` stops a pod's containers in parallel.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kvant_contracts.backoff import delay as restart_delay
from kvant_contracts.kube_object import Obj
from kvant_dev.nodeagent.fieldrefs import expand
from kvant_dev.nodeagent.images import LocalImage
from kvant_dev.nodeagent.probes import ProbeState
from kvant_dev.process import ManagedProcess

log = logging.getLogger("kvant.nodeagent.container")
_BACKOFF_START, _BACKOFF_MAX, _BACKOFF_RESET = 1.0, 30.0, 60.0
# The kubelet's minimumGracePeriodInSeconds: a container whose preStop hook used the whole grace period
# still gets SIGTERM and this long to act on it before SIGKILL.
_MIN_GRACE_AFTER_HOOK = 2.0
_HOOK_POLL_SECONDS = 0.05


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
    quick_restarts: int = 0  # restarts in a row of a container that ran under _BACKOFF_RESET
    startup: ProbeState | None = None
    readiness: ProbeState | None = None
    liveness: ProbeState | None = None
    env: dict[str, str] = field(default_factory=dict)  # the running process's, which exec hooks get too
    tied: bool = True

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def exec_argv(self, command: list[str]) -> list[str]:
        """argv that runs `command` inside the running container: its namespaces, root and workdir."""
        assert self.process is not None
        target = f"--target={self.process.pid}"
        return ["nsenter", target, "--mount", "--net", "--uts", "--root", "--wd", "--", *command]

    def argv(self, env: dict[str, str]) -> list[str]:
        command = self.spec.get("command") or self.image.entrypoint
        args = self.spec.get("args") or []
        return [expand(str(part), env) for part in [*command, *args]]

    def start(self, env: dict[str, str], isolation: list[str], cwd: Path, tied: bool) -> None:
        """Starts the container's command behind `isolation`, the argv prefix of its namespaces."""
        argv = isolation + self.argv(env)
        self.env, self.tied = dict(env), tied
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
        """The kubelet's killContainer: the preStop hook (given a grace period), then SIGTERM, and
        SIGKILL once `grace_seconds` from now have passed."""
        if self.process is None or not self.process.running():
            return
        deadline = time.monotonic() + grace_seconds
        remaining = grace_seconds
        if grace_seconds > 0 and self._pre_stop(deadline):
            remaining = max(deadline - time.monotonic(), _MIN_GRACE_AFTER_HOOK)
        code = self.process.stop(remaining)
        self._record_exit(code if code is not None else 137, reason)

    def _pre_stop(self, deadline: float) -> bool:
        """Runs the preStop hook until it ends or `deadline`; returns whether there was one to run."""
        hook: Obj = self.spec.get("lifecycle", {}).get("preStop") or {}
        if "sleep" in hook:
            time.sleep(max(0.0, min(float(hook["sleep"]["seconds"]), deadline - time.monotonic())))
            return True
        if "exec" not in hook:
            if hook:
                log.warning("container %s: only exec and sleep preStop hooks run locally", self.name)
            return False
        command = [str(part) for part in hook["exec"]["command"]]
        assert self.process is not None
        log_path = self.log_dir / f"{self.name}.{self.restart_count}.prestop.log"
        try:
            process = ManagedProcess(
                f"{self.name}-prestop",
                self.exec_argv(command),
                log_path,
                env=self.env,
                tied_to_parent=self.tied,
            )
        except OSError as err:
            log.warning("container %s: preStop hook did not start: %s", self.name, err)
            return True
        while process.running() and time.monotonic() < deadline:
            time.sleep(_HOOK_POLL_SECONDS)
        if process.running():
            log.warning("container %s: preStop hook still running at the end of the grace period", self.name)
        code = process.stop(grace_seconds=0.0)
        if code:
            log.warning("container %s: preStop hook exited %s: %s", self.name, code, process.log_tail(5))
        return True

    @property
    def backoff(self) -> float:
        """The wait before the next start: 1 s, doubling with each quick restart in a row, at most 30 s."""
        return restart_delay(self.quick_restarts + 1, _BACKOFF_START, _BACKOFF_MAX)

    def schedule_restart(self) -> None:
        ran_for = time.time() - self.started_at
        # A container that ran long starts its streak again; each quick crash doubles the wait.
        self.quick_restarts = 0 if ran_for > _BACKOFF_RESET else self.quick_restarts + 1
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


def stop_all(containers: list[Container], grace_seconds: float, reason: str) -> None:
    """Stops `containers` at once, as the kubelet does a pod's: each its own preStop hook, SIGTERM and
    SIGKILL, all within the one grace period. In turn, one container's hook waiting for another to
    leave (the engine's, for the gate's drain) would wait for a SIGTERM that never comes."""
    threads = [
        threading.Thread(target=container.kill, args=(grace_seconds, reason), name=f"stop-{container.name}")
        for container in containers
        if container.process is not None and container.process.running()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
