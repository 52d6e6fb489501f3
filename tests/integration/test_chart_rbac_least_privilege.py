"""The chart's ServiceAccount, impersonated with `kubectl auth can-i` against the real RBAC authorizer:
it may do what the operator does, and cannot read Secrets, write CRDs, grant itself more, or touch
namespaces the values exclude."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kvant_operator.object_keys import DELETION_COST, PODS_GONE_ANNOTATION
from kvant_operator.render.gate_access import gate_identity
from tests.helm_chart import CHART, render
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
RELEASE_NAMESPACE, WATCHED, EXCLUDED = "kvant-rbac", "rbac-watched", "rbac-excluded"
OPERATOR_CAN = [  # (verb, resource): every call in kvant_operator/kube.py and kopf's own
    ("list", "quantizedmodels.kvant.dev"),
    ("watch", "quantizedmodels.kvant.dev"),
    ("patch", "quantizedmodels.kvant.dev/status"),
    ("create", "jobs.batch"),
    ("list", "jobs.batch"),
    ("patch", "deployments.apps"),
    ("create", "services"),
    ("patch", "poddisruptionbudgets.policy"),
    ("patch", "horizontalpodautoscalers.autoscaling"),
    ("create", "configmaps"),
    ("watch", "configmaps"),
    ("list", "pods"),
    ("watch", "pods"),
    ("patch", "pods"),  # one annotation only: pod-writes.yaml, tested below
    ("patch", "serviceaccounts"),
    ("patch", "roles.rbac.authorization.k8s.io"),
    ("patch", "rolebindings.rbac.authorization.k8s.io"),
    ("get", "pods/log"),
    ("create", "events"),
    # the serving step deletes what a spec change stops rendering (never ConfigMaps)
    *(
        ("delete", resource)
        for resource in (
            "deployments.apps",
            "services",
            "poddisruptionbudgets.policy",
            "horizontalpodautoscalers.autoscaling",
            "serviceaccounts",
            "roles.rbac.authorization.k8s.io",
            "rolebindings.rbac.authorization.k8s.io",
            "networkpolicies.networking.k8s.io",
        )
    ),
    # kopf indexes (kube_cache.py) list and watch every kind the serving step applies
    *(
        (verb, resource)
        for verb in ("list", "watch")
        for resource in (
            "deployments.apps",
            "services",
            "poddisruptionbudgets.policy",
            "horizontalpodautoscalers.autoscaling",
            "configmaps",
            "serviceaccounts",
            "roles.rbac.authorization.k8s.io",
            "rolebindings.rbac.authorization.k8s.io",
            "networkpolicies.networking.k8s.io",
        )
    ),
]


class Account:
    def __init__(self, cluster: Any, release: str) -> None:
        self.cluster = cluster
        self.user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{release}-kvant"

    def can(self, verb: str, resource: str, namespace: str | None = None, name: str = "") -> bool:
        resource, _, subresource = resource.partition("/")
        args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, f"--as={self.user}"]
        args += [f"--subresource={subresource}"] if subresource else []
        args += [f"--namespace={namespace}"] if namespace else ["--all-namespaces"]
        result = self.cluster.kubectl(*args, check=False)
        assert result.returncode in (0, 1), result.stderr
        return bool(result.returncode == 0)


def _install(cluster: Any, release: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Applies the chart's ServiceAccount, RBAC and admission policy objects only: nothing here may run
    an operator."""
    objects = [
        o
        for o in render(values, release=release, namespace=RELEASE_NAMESPACE)
        if o["kind"] in RBAC_KINDS | POLICY_KINDS
    ]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    return objects


@pytest.fixture(scope="module")
def cluster_ready(apiserver: Any) -> Iterator[Any]:
    apiserver.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    for namespace in (RELEASE_NAMESPACE, WATCHED, EXCLUDED):
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest))
    installed: list[dict[str, Any]] = []
    yield apiserver, installed
    cluster_scoped = [o for o in installed if o["kind"].startswith("Cluster") or o["kind"] in POLICY_KINDS]
    if cluster_scoped:
        apiserver.kubectl("delete", "-f", "-", "--wait=false", input=yaml.safe_dump_all(cluster_scoped))
    for namespace in (RELEASE_NAMESPACE, WATCHED, EXCLUDED):
        apiserver.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.fixture(scope="module")
def namespaced(cluster_ready: Any) -> Account:
    cluster, installed = cluster_ready
    installed += _install(cluster, "rbac-ns", {"watchNamespaces": [WATCHED]})
    return Account(cluster, "rbac-ns")


@pytest.fixture(scope="module")
def clusterwide(cluster_ready: Any) -> Account:
    cluster, installed = cluster_ready
    installed += _install(cluster, "rbac-cw", {})
    return Account(cluster, "rbac-cw")


@pytest.mark.parametrize(("verb", "resource"), OPERATOR_CAN)
def test_operator_may_do_its_work_in_watched_namespace(namespaced: Account, verb: str, resource: str):
    assert namespaced.can(verb, resource, WATCHED)


@pytest.mark.parametrize(("verb", "resource"), OPERATOR_CAN)
def test_excluded_namespace_is_untouchable(namespaced: Account, verb: str, resource: str):
    assert not namespaced.can(verb, resource, EXCLUDED)


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
@pytest.mark.parametrize("verb", ["get", "list", "watch"])
def test_cannot_read_secrets(request: pytest.FixtureRequest, account: str, verb: str):
    sa: Account = request.getfixturevalue(account)
    for namespace in (WATCHED, EXCLUDED, RELEASE_NAMESPACE, "kube-system"):
        assert not sa.can(verb, "secrets", namespace), f"{verb} secrets in {namespace}"
    assert not sa.can(verb, "secrets")


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
@pytest.mark.parametrize("verb", ["create", "update", "patch", "delete"])
def test_cannot_write_crds(request: pytest.FixtureRequest, account: str, verb: str):
    sa: Account = request.getfixturevalue(account)
    assert not sa.can(verb, "customresourcedefinitions.apiextensions.k8s.io")


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
def test_cannot_grant_itself_more(request: pytest.FixtureRequest, account: str):
    sa: Account = request.getfixturevalue(account)
    # It creates the router's and the gates' Roles and RoleBindings (pod reads; one ConfigMap's reads),
    # but may neither bind nor escalate: the API refuses a Role that grants more than the operator
    # holds, such as Secrets.
    for resource in ("roles.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io"):
        assert not sa.can("escalate", resource, WATCHED)
        assert not sa.can("bind", resource, WATCHED)
    reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "escalation-probe", "namespace": WATCHED},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }
    refused = sa.cluster.kubectl(
        "create", "--dry-run=server", f"--as={sa.user}", "-f", "-", input=json.dumps(reader), check=False
    )
    assert refused.returncode != 0 and "escalat" in refused.stderr, refused.stderr
    pods = {
        **reader,
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    allowed = sa.cluster.kubectl(
        "create", "--dry-run=server", f"--as={sa.user}", "-f", "-", input=json.dumps(pods), check=False
    )
    assert allowed.returncode == 0, allowed.stderr
    gate_role = next(
        o for o in gate_identity({"metadata": {"name": "tiny", "namespace": WATCHED}}) if o["kind"] == "Role"
    )
    allowed = sa.cluster.kubectl(
        "create", "--dry-run=server", f"--as={sa.user}", "-f", "-", input=json.dumps(gate_role), check=False
    )
    assert allowed.returncode == 0, allowed.stderr  # the gate's Role: reads of its limits ConfigMap
    assert not sa.can("create", "clusterrolebindings.rbac.authorization.k8s.io")
    assert not sa.can("impersonate", "serviceaccounts", WATCHED)
    assert not sa.can("create", "pods", WATCHED)  # Jobs and Deployments make pods, the operator never does


def test_clusterwide_account_patches_only_its_own_peering(clusterwide: Account):
    assert clusterwide.can("patch", "clusterkopfpeerings.kopf.dev", name="rbac-cw-kvant")
    assert not clusterwide.can("patch", "clusterkopfpeerings.kopf.dev", name="someone-else")
    assert clusterwide.can("create", "jobs.batch", EXCLUDED)  # all namespaces is what cluster-wide means


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
def test_deletes_nothing_but_serving_objects(request: pytest.FixtureRequest, account: str):
    sa: Account = request.getfixturevalue(account)
    # Records (ConfigMaps) outlive models, Jobs are kept as evidence, and models are the users'.
    for resource in (
        "configmaps",
        "jobs.batch",
        "pods",
        "persistentvolumeclaims",
        "quantizedmodels.kvant.dev",
    ):
        assert not sa.can("delete", resource, WATCHED), resource


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
def test_the_operator_may_mark_a_deleted_namespace_and_change_nothing_else_of_it(
    request: pytest.FixtureRequest, account: str
):
    """namespace_nudge's one write (an annotation) is allowed; the chart's ValidatingAdmissionPolicy
    refuses every other change the operator's account could make to a Namespace through RBAC's patch,
    such as relaxing Pod Security's labels."""
    sa: Account = request.getfixturevalue(account)
    assert sa.can("get", "namespaces", WATCHED, name=WATCHED)
    assert sa.can("patch", "namespaces", WATCHED, name=WATCHED)
    assert not sa.can("delete", "namespaces", WATCHED, name=WATCHED)
    if account == "namespaced":
        assert not sa.can("patch", "namespaces", EXCLUDED, name=EXCLUDED)

    def patch(body: dict[str, Any]) -> Any:
        return sa.cluster.kubectl(
            "patch",
            "namespace",
            WATCHED,
            f"--as={sa.user}",
            "--type=merge",
            "--dry-run=server",
            "-p",
            json.dumps(body),
            check=False,
        )

    relax = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    # The API server loads a new policy within a second or two: wait until it refuses.
    wait_for(lambda: patch(relax).returncode != 0, 30, "the namespace-writes policy to take effect")
    assert "may not change a Namespace's labels" in patch(relax).stderr
    for refused in (
        {"metadata": {"annotations": {"someone-else": "x"}}},
        {"metadata": {"finalizers": ["kvant.dev/hold"]}},
    ):
        answer = patch(refused)
        assert answer.returncode != 0 and "Kvant's operator may" in answer.stderr, (refused, answer.stderr)
    marked = patch({"metadata": {"annotations": {PODS_GONE_ANNOTATION: "2026-12-05T00:00:00Z"}}})
    assert marked.returncode == 0, marked.stderr


@pytest.mark.parametrize("account", ["namespaced", "clusterwide"])
def test_the_operator_may_write_a_pods_deletion_cost_and_change_nothing_else_of_it(
    request: pytest.FixtureRequest, account: str
):
    """reconcile/scale_in's one write on a pod (its deletion cost) is allowed; the chart's
    ValidatingAdmissionPolicy refuses every other change RBAC's pod patch would allow, such as a new
    label (which moves a pod into another Service) or another annotation."""
    sa: Account = request.getfixturevalue(account)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "scale-in-probe", "namespace": WATCHED, "labels": {"kvant.dev/model": "tiny"}},
        "spec": {"containers": [{"name": "engine", "image": "ghcr.io/kvant-dev/kvant-runtime:0.1.0"}]},
    }
    # This API server runs no controller-manager to make the namespace's default ServiceAccount.
    account_of_pod = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    sa.cluster.kubectl("apply", "-n", WATCHED, "--server-side", "-f", "-", input=json.dumps(account_of_pod))
    sa.cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(pod))
    assert sa.can("patch", "pods", WATCHED)
    assert not sa.can("create", "pods", WATCHED) and not sa.can("delete", "pods", WATCHED)
    if account == "namespaced":
        assert not sa.can("patch", "pods", EXCLUDED)

    def patch(body: dict[str, Any]) -> Any:  # strategic: a container is merged by its name
        return sa.cluster.kubectl(
            "patch", "pod", "scale-in-probe", f"--namespace={WATCHED}", f"--as={sa.user}",
            "--type=strategic", "--dry-run=server", "-p", json.dumps(body), check=False,
        )  # fmt: skip

    relabel = {"metadata": {"labels": {"kvant.dev/model": "other"}}}
    wait_for(lambda: patch(relabel).returncode != 0, 30, "the pod-writes policy to take effect")
    assert "may not change a pod's labels" in patch(relabel).stderr
    for refused in (
        {"metadata": {"annotations": {"someone-else": "x"}}},
        {"metadata": {"finalizers": ["kvant.dev/hold"]}},
        {"spec": {"containers": [{"name": "engine", "image": "registry.example/other:1"}]}},
    ):
        answer = patch(refused)
        assert answer.returncode != 0 and "Kvant's operator may" in answer.stderr, (refused, answer.stderr)
    costed = patch({"metadata": {"annotations": {DELETION_COST: "40"}}})
    assert costed.returncode == 0, costed.stderr
