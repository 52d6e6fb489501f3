"""The Grafana dashboard ships as a ConfigMap for Grafana's sidecar, only when asked, holding the file
the PromQL test runs (charts/kvant/files/kvant-dashboard.json) unchanged."""

from __future__ import annotations

import json

from tests.helm_chart import CHART, of_kind, render

DASHBOARD = CHART / "files" / "kvant-dashboard.json"


def _dashboards(values: dict) -> list[dict]:
    return [c for c in of_kind(render(values), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]


def test_off_by_default() -> None:
    assert _dashboards({}) == []


def test_when_enabled_the_sidecar_label_and_the_file_are_there() -> None:
    (configmap,) = _dashboards(
        {"grafanaDashboard": {"enabled": True, "sidecarLabel": "grafana_dashboard", "sidecarLabelValue": "1"}}
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["kvant-model.json"]) == json.loads(DASHBOARD.read_text())


def test_every_panel_shows_one_model_per_replica() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "model"} <= variables
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert "$namespace" in target["expr"] or "protection_decisions" in target["expr"], target["expr"]
