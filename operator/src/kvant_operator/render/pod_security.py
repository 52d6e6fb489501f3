"""Every pod Kvant renders passes the `restricted` Pod Security Standard.

Pods run as a fixed non-root user (65532, the distroless "nonroot" id the operator image uses too),
with the runtime's default seccomp profile, no privilege escalation and no capabilities; `fsGroup`
makes the artifact volume writable for that user where the volume type supports ownership. Pods
automount no ServiceAccount token: a container that calls the API gets its own projected token
volume instead (the serving pods' gate, see gate_access), so no other container holds it.

Images that assume a writable home (SGLang's JIT caches for Triton, FlashInfer and DeepGEMM;
Hugging Face's cache) get one: HOME points into a per-pod `scratch` emptyDir, because the user has
no home directory in the image and the image's own folders are not writable for it.
"""

from __future__ import annotations

import copy

from kvant_contracts.kube_object import Obj

USER = 65532
SCRATCH = "/scratch"

POD_SECURITY: Obj = {
    "runAsNonRoot": True,
    "runAsUser": USER,
    "runAsGroup": USER,
    "fsGroup": USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: Obj = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def restricted(pod_spec: Obj) -> Obj:
    """`pod_spec` with the restricted settings on the pod and every container, and a scratch home."""
    spec = copy.deepcopy(pod_spec)
    spec["securityContext"] = dict(POD_SECURITY)
    spec["automountServiceAccountToken"] = False
    spec["volumes"] = [*spec.get("volumes", []), {"name": "scratch", "emptyDir": {}}]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container["securityContext"] = copy.deepcopy(CONTAINER_SECURITY)
        container["volumeMounts"] = [
            *container.get("volumeMounts", []),
            {"name": "scratch", "mountPath": SCRATCH},
        ]
        container["env"] = [*container.get("env", []), {"name": "HOME", "value": SCRATCH}]
    return spec
