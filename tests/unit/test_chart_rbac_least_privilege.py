"""The chart's RBAC, as rendered: no wildcards, no Secrets, no writes to CRDs, and with
`watchNamespaces` no namespaced permission granted cluster-wide."""

from __future__ import annotations

import pytest

from kvant_contracts.kube_object import Obj
from tests.helm_chart import of_kind, render

ROLE_KINDS = ("Role", "ClusterRole")
READ_ONLY = {"get", "list", "watch"}


def _rules(values: Obj) -> list[tuple[str, Obj]]:
    objects = render(values)
    return [
        (role["kind"], rule)
        for kind in ROLE_KINDS
        for role in of_kind(objects, kind)
        for rule in role["rules"]
    ]


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["clusterwide", "namespaced"])
def test_no_wildcards_and_no_secrets(values):
    rules = _rules(values)
    assert rules, "the chart renders no Role or ClusterRole rules"
    for _, rule in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), rule
        assert "secrets" not in rule["resources"], rule
        assert not rule.get("nonResourceURLs"), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["clusterwide", "namespaced"])
def test_crds_are_read_only(values):
    crd_rules = [rule for _, rule in _rules(values) if "apiextensions.k8s.io" in rule["apiGroups"]]
    assert crd_rules
    for rule in crd_rules:
        assert set(rule["verbs"]) <= READ_ONLY, rule


def test_namespaced_mode_grants_nothing_namespaced_cluster_wide():
    rules = _rules({"watchNamespaces": ["team-a"]})
    assert any(kind == "ClusterRole" for kind, _ in rules), "namespaced mode renders no ClusterRole rules"
    for kind, rule in rules:
        if kind == "ClusterRole":
            assert set(rule["verbs"]) <= READ_ONLY, rule
            assert set(rule["resources"]) <= {"customresourcedefinitions", "namespaces"}, rule


def test_peering_patch_is_limited_to_the_release_peering():
    rules = _rules({})
    assert any("kopf.dev" in rule["apiGroups"] and "patch" in rule["verbs"] for _, rule in rules), (
        "the chart renders no rule that patches kopf.dev peerings"
    )
    for _, rule in rules:
        if "kopf.dev" in rule["apiGroups"] and "patch" in rule["verbs"]:
            assert rule["resourceNames"] == ["kvant"], rule
