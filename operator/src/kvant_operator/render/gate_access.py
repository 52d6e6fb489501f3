"""The gate's API access: it follows its model's limits ConfigMap through the API server, so a limits
edit applies within a second rather than on the kubelet's next sync of the mounted file (up to ~90 s).

Per model, a ServiceAccount `<model>-gate` with a Role that may get, list and watch that one
ConfigMap (`resourceNames`; a list or watch with `fieldSelector=metadata.name=` is authorized against
it), and nothing else. Its token reaches the gate container only: the pod automounts none, and the
projected token volume is mounted into the gate alone, never into the engine. The mounted file
stays the gate's fallback (see kvant_runtime.gate.limits_source).
"""

from __future__ import annotations

import copy

from kvant_contracts.kube_object import Obj
from kvant_operator.object_keys import SERVING_COMPONENT
from kvant_operator.render.api_identity import api_access_mount, api_access_volume, api_identity
from kvant_operator.render.limits_configmap import limits_name
from kvant_operator.render.meta import object_meta

VOLUME = "gate-api-access"
VERBS = ["get", "list", "watch"]


def gate_account(model: str) -> str:
    return f"{model}-gate"


def gate_identity(body: Obj) -> list[Obj]:
    """The gate's ServiceAccount, its Role (the model's limits ConfigMap, read-only) and the binding."""
    model = body["metadata"]["name"]
    rule = {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [limits_name(model)],
        "verbs": VERBS,
    }
    return api_identity(object_meta(body, gate_account(model), SERVING_COMPONENT), [rule])


def with_gate_api_access(pod_spec: Obj, body: Obj) -> Obj:
    """`pod_spec` (engine first, gate second) running as the gate's account, the token in the gate only."""
    model, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    spec = copy.deepcopy(pod_spec)
    gate = spec["containers"][1]
    spec["serviceAccountName"] = gate_account(model)
    spec["volumes"].append(api_access_volume(VOLUME))
    gate.setdefault("volumeMounts", []).append(api_access_mount(VOLUME))
    after_file = gate["args"].index("--limits") + 2  # beside the file it stands in for
    gate["args"][after_file:after_file] = ["--limits-configmap", f"{namespace}/{limits_name(model)}"]
    return spec
