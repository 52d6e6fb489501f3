"""The model's access Secrets in its serving pods: the admin token and the client API keys.

The gate gets each as a file from a Secret volume (the kubelet keeps it current, and the gate re-reads
it, so rotating a key needs no restart). The SGLang engine gets the admin token as an environment
variable, which `kvant launch` passes on as `--admin-api-key`, so the engine itself also refuses admin
calls without it. The operator only names the Secrets; it never reads them.
"""

from __future__ import annotations

import copy

from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import ADMIN_KEY_ENV
from kvant_operator.api.spec import AccessSpec, Engine

SECRETS_DIR = "/etc/kvant/access"
ADMIN_KEY, API_KEYS_KEY = "token", "keys"  # the keys the Secrets must hold


def with_access(pod_spec: Obj, access: AccessSpec, engine: Engine) -> Obj:
    spec = copy.deepcopy(pod_spec)
    engine_container, gate = spec["containers"][0], spec["containers"][1]
    mounted = [
        ("admin-token", access.admin_token_secret, ADMIN_KEY, "--admin-token-file"),
        ("api-keys", access.api_keys_secret, API_KEYS_KEY, "--api-keys-file"),
    ]
    for volume, secret, key, flag in mounted:
        if secret is None:
            continue
        folder = f"{SECRETS_DIR}/{volume}"
        spec["volumes"].append(
            {"name": volume, "secret": {"secretName": secret, "items": [{"key": key, "path": key}]}}
        )
        gate.setdefault("volumeMounts", []).append({"name": volume, "mountPath": folder, "readOnly": True})
        gate["args"] += [flag, f"{folder}/{key}"]
    if access.admin_token_secret is not None and engine is Engine.SGLANG:
        secret_ref = {"secretKeyRef": {"name": access.admin_token_secret, "key": ADMIN_KEY}}
        engine_container.setdefault("env", []).append({"name": ADMIN_KEY_ENV, "valueFrom": secret_ref})
    return spec
