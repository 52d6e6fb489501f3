"""ManagedProcess.restart() runs the same command again in a new process group, its log appended."""

from __future__ import annotations

from pathlib import Path

from kvant_dev.netutil import wait_until
from kvant_dev.process import ManagedProcess


def test_restart_runs_the_same_command_again(tmp_path: Path) -> None:
    log = tmp_path / "echo.log"
    proc = ManagedProcess(
        "echo", ["sh", "-c", "echo started; exec sleep 30"], log, env={"PATH": "/usr/bin:/bin"}
    )
    try:
        wait_until(lambda: "started" in log.read_text(), 10, "the first start")
        first = proc.pid
        proc.restart(grace_seconds=0)
        wait_until(lambda: log.read_text().count("started") == 2, 10, "the second start")
        assert proc.running() and proc.pid != first
    finally:
        proc.stop(grace_seconds=0)
    assert not proc.running()
