"""`helm lint --strict` and `helm template` pass for the default (cluster-wide) and namespaced values,
and values.schema.json rejects values that would render a broken operator."""

from __future__ import annotations

import pytest

from tests.helm_chart import CHART, helm, of_kind, one, render, value_flags

NAMESPACED = {"watchNamespaces": ["team-a", "team-b"]}


@pytest.mark.parametrize("values", [{}, NAMESPACED], ids=["clusterwide", "namespaced"])
def test_helm_lint_strict_passes(values):
    result = helm("lint", "--strict", str(CHART), *value_flags(values))
    assert "0 chart(s) failed" in result.stdout


def test_default_values_render_a_clusterwide_operator():
    objects = render()
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == sorted(
        [
            "ClusterKopfPeering",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
            # the operator's Namespace and pod writes, each narrowed to one annotation
            # (namespace-writes.yaml, pod-writes.yaml)
            *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2,
        ]
    )
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--namespace")]


def test_watch_namespaces_render_one_role_and_peering_per_namespace():
    objects = render(NAMESPACED)
    for kind in ("Role", "RoleBinding", "KopfPeering"):
        assert sorted(obj["metadata"]["namespace"] for obj in of_kind(objects, kind)) == ["team-a", "team-b"]
    assert not of_kind(objects, "ClusterKopfPeering")
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]


def test_operator_settings_reach_the_container_env():
    values = {
        "artifactPVC": "models",
        "image": {"runtime": {"repository": "r.example/kvant-runtime", "tag": "9"}},
    }
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KVANT_ARTIFACT_PVC"] == "models"
    assert env["KVANT_RUNTIME_IMAGE"] == "r.example/kvant-runtime:9"
    assert env["KVANT_OPERATOR_IMAGE"].endswith("/kvant-operator:0.1.0")  # the chart's appVersion


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"replicas": 0}, "/replicas"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
        ({"replica": 2}, "replica"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
    ],
    ids=["zero-replicas", "bad-namespace", "misspelt-key", "port-range"],
)
def test_schema_rejects_invalid_values_naming_the_field(values, field):
    result = helm("template", "kvant", str(CHART), *value_flags(values), check=False)
    assert result.returncode != 0
    assert field in result.stderr, result.stderr
