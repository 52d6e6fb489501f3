"""Kvant's alert rules, checked and unit-tested by Prometheus' own promtool (from the toolchain), with
a firing and a not-firing case for every alert and a section of the docs' runbook for each."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_dev.toolchain import Toolchain

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "kvant" / "files" / "kvant-alerts.yaml"
TESTS = ROOT / "tests" / "promtool" / "kvant-alerts-test.yaml"
RUNBOOK = ROOT / "docs" / "operations" / "runbook.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = Toolchain.locate().prometheus.parent / "promtool"
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, check=False)


def _alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


def test_the_rules_are_valid() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", str(TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_not_firing_case() -> None:
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    alerts = _alerts()
    assert alerts, f"no alert rules were read from {RULES.relative_to(ROOT)}"
    for name in alerts:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in mine), f"{name} never fires in the tests"
        assert any(not c.get("exp_alerts") for c in mine), f"{name} has no not-firing case"


def test_every_runbook_link_names_a_section_of_the_runbook_page() -> None:
    """Each alert links into the docs site's runbook page, at a heading that page gives that id.
    (tests/unit/test_docs_site_builds_strict.py checks the same links against the built site.)"""
    site_url = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"]
    page = f"{site_url.rstrip('/')}/operations/runbook/"
    ids = set(re.findall(r"^#+ .*\{#([a-z0-9-]+)\}\s*$", RUNBOOK.read_text(), flags=re.MULTILINE))
    alerts = _alerts()
    assert alerts, f"no alert rules were read from {RULES.relative_to(ROOT)}"
    for name, rule in alerts.items():
        url, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert url == page, f"{name}: runbook_url {url} is not the runbook page {page}"
        assert anchor == name.lower(), f"{name}: runbook_url anchor #{anchor}, expected #{name.lower()}"
        assert anchor in ids, f"{name}: {RUNBOOK.relative_to(ROOT)} has no heading {{#{anchor}}}"


@pytest.mark.parametrize(
    "alert", ["KvantGateRejecting", "KvantAtMaxReplicasAndShedding", "KvantCriticalRequestsRefused"]
)
def test_the_shedding_alerts_count_exactly_the_gates_busy_reasons(alert: str) -> None:
    """A rule file cannot import the contract, so this holds its regex to GATE_BUSY_REASONS."""
    expr = _alerts()[alert]["expr"]
    regexes = set(re.findall(r'reason=~"([^"]+)"', expr))
    assert regexes == {"|".join(GATE_BUSY_REASONS)}
