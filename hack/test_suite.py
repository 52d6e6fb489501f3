"""Runs the whole suite for `make test` in two lanes at once, then names every failure of both.

Why two lanes: on a two-core machine the cluster tests spend most of their time waiting (on a
kubelet's sync delay, a scheduler, a probe period), with a core idle, while the host-only unit
tests are pure CPU. So the unit tests (`not cluster and not e2e`) run in a second pytest process
beside the cluster lane's first tests (the integration tests, which wait most), instead of after
them. The CPU-heavy tests that measure a real engine's course are marked `e2e` and stay in the
cluster lane, which reaches them after the unit lane has ended.

The unit lane's output goes to a file and is printed whole when it ends, so the log reads as two
blocks and not interleaved lines. Its host-leftovers check looks at files only
(KVANT_SUITE_SHARES_HOST): the other lane's local cluster adds network links meanwhile, and the
cluster lane checks those itself.

With PYTEST_ARGS (a path, -k, -m), one pytest runs them as before: a chosen subset is one lane.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hack.failures import report_failures
from tests.host_leftovers import SHARES_HOST

HOST_ONLY = "not cluster and not e2e"


def _pytest(venv: Path, report: Path, *args: str) -> list[str]:
    python = str(venv / "bin" / "python")
    return [python, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *args]


def run(venv: Path, extra: list[str]) -> int:
    folder = Path(tempfile.mkdtemp(prefix="kvant-suite-"))
    started = time.monotonic()
    if extra:
        report = folder / "suite.xml"
        status = subprocess.run(_pytest(venv, report, "--durations=30", *extra), check=False).returncode
        reports = [report]
    else:
        unit_report, cluster_report = folder / "unit.xml", folder / "cluster.xml"
        unit_log = folder / "unit.log"
        with unit_log.open("w") as log:
            unit = subprocess.Popen(
                _pytest(venv, unit_report, "-q", "--durations=10", "-m", HOST_ONLY, "tests"),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, SHARES_HOST: "1"},
            )
            cluster_status = subprocess.run(
                _pytest(venv, cluster_report, "--durations=30", "-m", f"not ({HOST_ONLY})"), check=False
            ).returncode
            unit_status = unit.wait()
        print(f"[make] the unit lane ({HOST_ONLY}), which ran beside the cluster lane:", flush=True)
        print(unit_log.read_text(errors="replace"), flush=True)
        status = cluster_status or unit_status
        reports = [unit_report, cluster_report]
    print(f"[make] test suite took {round(time.monotonic() - started)}s", flush=True)
    report_failures(reports)
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    return status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.stderr.write("usage, from the repository root: python -m hack.test_suite VENV [PYTEST_ARGS...]\n")
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1]), sys.argv[2:]))
