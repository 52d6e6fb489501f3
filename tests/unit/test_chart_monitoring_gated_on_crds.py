"""ServiceMonitor, PodMonitor and PrometheusRule render only where monitoring.coreos.com/v1 is served."""

from __future__ import annotations

import yaml

from kvant_operator.render.serving import METRICS_PORT_NAME
from tests.helm_chart import CHART, of_kind, one, render

MONITORING = ["monitoring.coreos.com/v1"]
ALERTS = CHART / "files" / "kvant-alerts.yaml"


def test_no_monitors_without_the_prometheus_operator_api():
    objects = render()
    assert not of_kind(objects, "ServiceMonitor")
    assert not of_kind(objects, "PodMonitor")


def test_monitors_scrape_the_operator_service_and_model_pods():
    objects = render({"watchNamespaces": ["team-a"]}, api_versions=MONITORING)
    service = one(objects, "Service")
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    pods = one(objects, "PodMonitor")
    assert pods["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert pods["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "serving"
    assert [e["port"] for e in pods["spec"]["podMetricsEndpoints"]] == [METRICS_PORT_NAME]


def test_monitors_can_be_switched_off():
    values = {"metrics": {"serviceMonitor": {"enabled": False}, "modelPodMonitor": {"enabled": False}}}
    objects = render(values, api_versions=MONITORING)
    assert not of_kind(objects, "ServiceMonitor")
    assert not of_kind(objects, "PodMonitor")


def test_the_alerts_render_as_a_prometheus_rule_only_with_the_api_and_when_enabled():
    assert not of_kind(render(), "PrometheusRule")
    rule = one(render(api_versions=MONITORING), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())  # the file promtool tests, unchanged
    off = render({"metrics": {"prometheusRule": {"enabled": False}}}, api_versions=MONITORING)
    assert not of_kind(off, "PrometheusRule")


def test_the_runbook_links_follow_the_docs_base_address() -> None:
    """Each alert's runbook_url moves to the chart's docsBaseURL, its page and anchor kept; nothing else
    in the rules changes."""
    shipped = yaml.safe_load(ALERTS.read_text())
    values = {"metrics": {"prometheusRule": {"docsBaseURL": "https://docs.example.test/kvant/"}}}
    moved = one(render(values, api_versions=MONITORING), "PrometheusRule")["spec"]
    before = [r for g in shipped["groups"] for r in g["rules"]]
    after = [r for g in moved["groups"] for r in g["rules"]]
    assert len(after) == len(before) > 0
    for old, new in zip(before, after, strict=True):
        url, _, anchor = old["annotations"]["runbook_url"].partition("#")
        assert url.endswith("/operations/runbook/") and anchor, old["alert"]
        assert (
            new["annotations"]["runbook_url"]
            == f"https://docs.example.test/kvant/operations/runbook/#{anchor}"
        )
        new["annotations"]["runbook_url"] = old["annotations"]["runbook_url"]
        assert new == old
