"""`make test` lists every failure again after the suite (hack/failures.py), each with its assertion,
so a CI log's tail names them all, whatever the interpreter prints while it exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAILURES = ROOT / "hack" / "failures.py"


def test_each_failure_is_listed_with_its_assertion(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "def test_passes():\n    assert True\n\n"
        "def test_fails():\n    assert 12.0 >= 18, 'a shared prefix stays mostly on one replica'\n\n"
        "def test_also_fails():\n    raise RuntimeError('no route to host')\n"
    )
    report = tmp_path / "junit.xml"
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}"]
    ran = subprocess.run(
        [*pytest, str(tmp_path / "test_sample.py")], cwd=tmp_path, check=False, capture_output=True
    )
    assert ran.returncode == 1, ran.stdout.decode()
    listed = subprocess.run(
        [sys.executable, str(FAILURES), str(report)], check=False, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert "[failures] 2 failed:" in out, out
    assert "FAILURE test_sample::test_fails" in out and "a shared prefix stays mostly on one replica" in out
    assert "FAILURE test_sample::test_also_fails" in out and "no route to host" in out
    assert "test_passes" not in out


def test_a_missing_or_broken_report_is_said_not_raised(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, str(FAILURES), str(tmp_path / "none.xml")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 0 and "no report" in missing.stdout
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites><testcase")
    said = subprocess.run(
        [sys.executable, str(FAILURES), str(broken)], check=False, capture_output=True, text=True
    )
    assert said.returncode == 0 and "is not XML" in said.stdout, said.stdout + said.stderr


def _run_lanes(tree: Path, e2e_passes: bool) -> subprocess.CompletedProcess[str]:
    """`make test`'s two lanes (hack/test_suite.py) over a sample tree: a host-only test under
    `tests` that fails, a cluster test that passes, an e2e test that passes or fails."""
    (tree / "tests").mkdir()
    (tree / "tests" / "test_host.py").write_text(
        "def test_unit_lane_fails():\n    assert 1 == 2, 'host-only'\n"
    )
    (tree / "test_cluster.py").write_text(
        "import pytest\n\n@pytest.mark.cluster\ndef test_cluster_lane_passes():\n    assert True\n\n"
        f"@pytest.mark.e2e\ndef test_e2e_lane():\n    assert {e2e_passes}, 'cluster-side'\n"
    )
    venv = Path(sys.executable).parent.parent
    return subprocess.run(
        [sys.executable, "-m", "hack.test_suite", str(venv)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        capture_output=True,
        text=True,
    )


def test_a_failure_in_the_unit_lane_alone_fails_the_suite(tmp_path: Path) -> None:
    ran = _run_lanes(tmp_path, e2e_passes=True)
    out = ran.stdout
    assert ran.returncode != 0, out
    assert "[failures] 1 failed:" in out and "test_unit_lane_fails" in out and "host-only" in out, out
    # The cluster lane ran the other two and only them (each test exactly once in all).
    assert "2 passed" in out and "the unit lane" in out and "test suite took" in out, out


def test_both_lanes_failures_are_listed_last(tmp_path: Path) -> None:
    ran = _run_lanes(tmp_path, e2e_passes=False)
    out = ran.stdout
    assert ran.returncode != 0, out
    assert "[failures] 2 failed:" in out, out
    listed = out[out.index("[failures]") :]
    assert "test_unit_lane_fails" in listed and "test_e2e_lane" in listed and "cluster-side" in listed
