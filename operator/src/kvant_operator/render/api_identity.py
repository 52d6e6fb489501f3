"""A pod's own API identity: a ServiceAccount, a Role with exactly the rules it needs and the
RoleBinding between them, all of one name in the model's namespace; and the projected volume that
carries its token to the containers that mount it, and to no other.

Kvant's pods never automount a token (`pod_security.restricted`). A container that calls the API
mounts `api_access_volume` at API_CREDENTIALS_DIR instead, with what the kubelet's own
`kube-api-access-*` volume holds: the token, the cluster CA and the namespace. So in a pod with an
engine and a gate, only the gate holds the token. The operator may create such a Role only while it
holds every permission the Role grants (RBAC's escalation check): the chart's `rbac.yaml` lists them.
"""

from __future__ import annotations

import copy

from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import API_CREDENTIALS_DIR

RBAC = "rbac.authorization.k8s.io"
# The token's lifetime, as the kubelet's own kube-api-access volume asks for; the kubelet rotates it
# at 80% of that, and the client reads the file again for every request.
TOKEN_SECONDS = 3607
ROOT_CA = "kube-root-ca.crt"  # the cluster CA, published in every namespace by the controller-manager


def api_identity(meta: Obj, rules: list[Obj]) -> list[Obj]:
    """The ServiceAccount, Role and RoleBinding named `meta["name"]`, each with a copy of `meta`."""
    name, namespace = meta["name"], meta["namespace"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": copy.deepcopy(meta)},
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": copy.deepcopy(meta), "rules": rules},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": copy.deepcopy(meta),
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def api_access_volume(name: str) -> Obj:
    """The pod's token, CA and namespace as one projected volume; mount it with `api_access_mount`."""
    namespace = {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [namespace]}},
            ]
        },
    }


def api_access_mount(volume: str) -> Obj:
    return {"name": volume, "mountPath": API_CREDENTIALS_DIR, "readOnly": True}
