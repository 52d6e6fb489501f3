"""The chart's alerts and dashboard combine SGLang's series as `kvant_contracts.sglang_metrics` says:
a per-scheduler metric (retractions, running and queued requests, throughput) is taken once per
scheduler (max by dp_rank: its TP ranks repeat it) before pods are summed, so tensor parallelism does
not multiply it. YAML and JSON cannot import the rule, so this test holds them to it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kvant_contracts.sglang_metrics import COMBINE, Combine

FILES = Path(__file__).resolve().parents[2] / "charts" / "kvant" / "files"
PER_SCHEDULER = [name for name, rule in COMBINE.items() if rule is Combine.PER_SCHEDULER]


def _expressions() -> list[str]:
    rules = yaml.safe_load((FILES / "kvant-alerts.yaml").read_text())
    found = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((FILES / "kvant-dashboard.json").read_text())
    found += [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    return found


def _uses(expr: str, name: str) -> list[str]:
    """Each use of `name` in `expr`, with what wraps it up to the enclosing `sum by`."""
    return re.findall(rf"sum by \([^)]*\) \(((?:(?!sum by).)*?{re.escape(name)}\b)", expr)


@pytest.mark.parametrize("expr", _expressions())
def test_per_scheduler_series_are_taken_once_per_scheduler(expr: str) -> None:
    assert PER_SCHEDULER, "kvant_contracts.sglang_metrics.COMBINE names no per-scheduler series"
    for name in PER_SCHEDULER:
        if name not in expr:
            continue
        uses = _uses(expr, name)
        assert uses, f"{name} in {expr!r} is not summed per pod"
        for use in uses:
            assert re.match(r"max by \([^)]*\bdp_rank\b[^)]*\)", use), (
                f"{name} summed over TP ranks in {expr!r}"
            )
