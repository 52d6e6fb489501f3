"""The gate's API access as rendered: its own ServiceAccount with a Role that reads only the model's
limits ConfigMap, owned by the model; the token mounted into the gate container alone, never into
the engine or an init container; the pod automounts none."""

from __future__ import annotations

from typing import Any

import pytest

from kvant_contracts.serving_pod import API_CREDENTIALS_DIR
from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of

EXAMPLES = ["tiny.yaml", "llama-70b-prefill-decode-fp8kv.yaml", "kimi-k2-int4-experts-fp8kv-8xh200.yaml"]


def objects(example: str) -> list[dict[str, Any]]:
    model = body(example)
    spec = spec_of(model)
    return serving_objects(
        ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings()), None
    )


def named(found: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in found if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_gates_role_reads_its_limits_configmap_and_nothing_else(example: str) -> None:
    found = objects(example)
    model = body(example)["metadata"]["name"]
    account = f"{model}-gate"
    role = named(found, "Role", account)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [f"{model}-limits"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = named(found, "RoleBinding", account)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "team-a"}]
    for obj in (named(found, "ServiceAccount", account), role, binding):
        (owner,) = obj["metadata"]["ownerReferences"]  # deleted with the model, as everything it owns
        assert owner["kind"] == "QuantizedModel" and owner["name"] == model and owner["controller"]
    kinds = [o["kind"] for o in found]
    assert kinds.index("ServiceAccount") < kinds.index("Deployment")  # the pods' account exists first


@pytest.mark.parametrize("example", EXAMPLES)
def test_only_the_gate_container_mounts_the_token(example: str) -> None:
    model = body(example)["metadata"]["name"]
    engines = [
        o
        for o in objects(example)
        if o["kind"] == "Deployment" and o["spec"]["template"]["spec"].get("volumes")
    ]
    engines = [
        d for d in engines if any(c["name"] == "gate" for c in d["spec"]["template"]["spec"]["containers"])
    ]
    assert engines
    for deployment in engines:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["serviceAccountName"] == f"{model}-gate"
        (volume,) = [v for v in pod["volumes"] if "projected" in v]
        sources = volume["projected"]["sources"]
        assert sources[0]["serviceAccountToken"]["path"] == "token"
        assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
        mounting = {
            c["name"]
            for c in [*pod.get("initContainers", []), *pod["containers"]]
            for m in c.get("volumeMounts", [])
            if m["name"] == volume["name"]
        }
        assert mounting == {"gate"}
        gate = next(c for c in pod["containers"] if c["name"] == "gate")
        mount = next(m for m in gate["volumeMounts"] if m["name"] == volume["name"])
        assert mount == {"name": volume["name"], "mountPath": API_CREDENTIALS_DIR, "readOnly": True}
        flag = gate["args"].index("--limits-configmap")
        assert gate["args"][flag + 1] == f"team-a/{model}-limits"
