"""A supervised child process with its own log file and a clean, group-wide stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# setpriv (util-linux) arms the parent-death signal before exec, so tests leave no orphans even
# if pytest itself is SIGKILLed; unlike preexec_fn it is safe to use from threads.
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "SIGKILL", "--"]


class ManagedProcess:
    """Runs one command in its own session; stop() signals the whole process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        tied_to_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        # Kept so restart() runs the very same command again.
        self.env = dict(env) if env is not None else None
        self.cwd, self.tied_to_parent = cwd, tied_to_parent
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.popen = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:  # a restart appends to the same log
            return subprocess.Popen(
                [*_DIE_WITH_PARENT, *self.argv] if self.tied_to_parent else self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_seconds: float = 10.0) -> int | None:
        return stop_group(self.popen.pid, grace_seconds, wait=self.popen.wait)

    def restart(self, grace_seconds: float = 10.0) -> None:
        """Stops the process group and starts the same command again, as a supervisor would after a
        crash (grace_seconds=0: SIGKILL at once, the crash itself). The caller waits for readiness."""
        self.stop(grace_seconds)
        self.popen = self._spawn()

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


def stop_group(pid: int, grace_seconds: float, wait: Callable[[float], int] | None = None) -> int | None:
    """SIGTERM the process group, then SIGKILL it after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    code: int | None = None
    while time.monotonic() < deadline:
        code = _reap(pid, wait)
        if code is not None or not is_alive(pid):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return code if code is not None else _reap(pid, wait, block=True)


def _reap(pid: int, wait: Callable[[float], int] | None, block: bool = False) -> int | None:
    if wait is None:
        return None
    try:
        return wait(5.0 if block else 0.001)
    except subprocess.TimeoutExpired:
        return None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def tail(path: Path, lines: int) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
