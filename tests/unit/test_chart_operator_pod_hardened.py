"""The operator pod: non-root, read-only root fs, no privilege escalation, no capabilities, seccomp
RuntimeDefault, probes, resources, two peered replicas behind a PodDisruptionBudget."""

from __future__ import annotations

from kvant_contracts.kube_object import Obj
from tests.helm_chart import one, render


def _pod_spec() -> tuple[list[Obj], Obj]:
    objects = render()
    return objects, one(objects, "Deployment")["spec"]["template"]["spec"]


def test_security_context_is_restricted():
    _, pod = _pod_spec()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert not ctx.get("privileged", False)


def test_two_peered_replicas_with_probes_resources_and_budget():
    objects, pod = _pod_spec()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = pod["containers"][0]
    assert "--peering=kvant" in container["args"]
    assert one(objects, "ClusterKopfPeering")["metadata"]["name"] == "kvant"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_ID"] == "metadata.name"  # kopf's peer identity
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_endpoints_bind_the_pod_ip():
    _, pod = _pod_spec()
    container = pod["containers"][0]
    assert "--liveness=http://$(POD_IP):8080/healthz" in container["args"]
    assert "--metrics-host=$(POD_IP)" in container["args"]
    pod_ip = next(e for e in container["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_operator_selector_never_matches_model_pods():
    objects, _ = _pod_spec()
    selector = one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "operator"  # model pods carry "serving"
