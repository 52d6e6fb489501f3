"""The node agent stops a pod's containers as the kubelet does: all at once, each its preStop hook
first (with the container's environment), then SIGTERM, then SIGKILL, within the one grace period.

The serving pod relies on it: the engine's hook waits until the gate, signalled at the same moment,
has drained and gone, so the engine outlives every request the gate still serves.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kvant_dev.nodeagent.container import Container, stop_all
from kvant_dev.nodeagent.images import LocalImage
from kvant_dev.process import is_alive

WAIT_SECONDS = 20.0
IMAGE = LocalImage("kvant-testbox", ["python3"])

# A container's main process: ready once its SIGTERM handler is in place; on SIGTERM it notes the
# event, leaves a file saying it has gone, and exits 0.
MAIN = """\
import os, pathlib, signal, sys
name, folder = sys.argv[1], pathlib.Path(os.environ["POD_DIR"])
def stop(signum, frame):
    with open(folder / "events", "a") as events:
        events.write(f"{name}: SIGTERM\\n")
    (folder / f"{name}-gone").touch()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
(folder / f"{name}-ready").touch()
while True:
    signal.pause()
"""
# The engine's hook: wait until the gate has gone, then note it (the kubelet runs it before SIGTERM).
WAIT_FOR_GATE = """\
import os, pathlib, time
folder = pathlib.Path(os.environ["POD_DIR"])
while not (folder / "gate-gone").exists():
    time.sleep(0.01)
with open(folder / "events", "a") as events:
    events.write("engine: preStop done\\n")
"""
# A hook that never ends (in sh, started at once); it leaves its pid so the test can see it stopped.
NEVER_ENDS = 'echo $$ > "$POD_DIR/hook-pid"; exec sleep 3600'


class HostContainer(Container):
    """A container run on the host as it is: no namespaces to enter for its hooks."""

    def exec_argv(self, command: list[str]) -> list[str]:
        return command


def _container(name: str, folder: Path, pre_stop: list[str] | None = None) -> HostContainer:
    spec: dict[str, object] = {
        "name": name,
        "image": "kvant-testbox",
        "command": [sys.executable, "-c", MAIN, name],
    }
    if pre_stop is not None:
        spec["lifecycle"] = {"preStop": {"exec": {"command": pre_stop}}}
    container = HostContainer(spec, IMAGE, folder / "logs")
    container.start({**os.environ, "POD_DIR": str(folder)}, [], folder, tied=True)
    return container


def _wait_ready(folder: Path, *names: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not all((folder / f"{name}-ready").exists() for name in names):
        assert time.monotonic() < deadline, f"{names} never became ready"
        time.sleep(0.01)


def _events(folder: Path) -> list[str]:
    return (folder / "events").read_text().splitlines()


def test_the_engine_hook_waits_for_the_gate_signalled_alongside_it(tmp_path: Path) -> None:
    engine = _container("engine", tmp_path, pre_stop=[sys.executable, "-c", WAIT_FOR_GATE])
    gate = _container("gate", tmp_path)
    _wait_ready(tmp_path, "engine", "gate")

    stop_all([engine, gate], WAIT_SECONDS, "Killed")

    # In turn, the engine's hook would have waited the whole grace period for a gate not yet signalled.
    assert _events(tmp_path) == ["gate: SIGTERM", "engine: preStop done", "engine: SIGTERM"]
    for container in (engine, gate):
        assert container.finished is not None
        assert (container.finished["exitCode"], container.finished["reason"]) == (0, "Killed")
        assert container.process is not None and not container.process.running()


def test_a_hook_that_outlasts_the_grace_period_is_stopped_and_sigterm_still_comes(tmp_path: Path) -> None:
    engine = _container("engine", tmp_path, pre_stop=["/bin/sh", "-c", NEVER_ENDS])
    _wait_ready(tmp_path, "engine")

    stop_all([engine], 1.0, "Killed")

    assert _events(tmp_path) == ["engine: SIGTERM"]  # the kubelet's extra moment after a hook overran
    assert engine.finished is not None and engine.finished["exitCode"] == 0
    assert not is_alive(int((tmp_path / "hook-pid").read_text()))
