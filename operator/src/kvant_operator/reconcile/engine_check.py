"""What the serving image holds: the `engine-check` init container's line, read into status.engine.

Each engine pod first runs the launcher with `--check` in the serving image (render/engine_launcher.py).
Its one JSON line says which SGLang the image has and, when the pod stops there, why: a version the
launcher does not drive, or flags that SGLang refuses. That becomes `status.engine` and, on failure,
`Degraded` naming the image and the cause, instead of a pod that crash-loops with nobody told.
"""

from __future__ import annotations

from kvant_contracts.job_lines import EngineCheck
from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.spec import Engine
from kvant_operator.api.status import EngineStatus
from kvant_operator.kube_door import KubeDoor
from kvant_operator.reconcile.state import Pass
from kvant_operator.render.engine_launcher import CHECK_CONTAINER
from kvant_operator.render.roles import engine_selector
from kvant_operator.settings import OperatorSettings


def read_engine_check(p: Pass, kube: KubeDoor, settings: OperatorSettings, rolling: bool) -> bool:
    """Sets p.engine from the newest checked engine pod; True when that check failed (Degraded set).
    Reads pod logs only while the image is not known yet or a rollout is under way."""
    if p.spec.serving.engine is not Engine.SGLANG:
        p.engine = None
        return False
    image = p.spec.serving.image or settings.runtime_image
    if p.engine is not None and p.engine.image == image and not rolling:
        return False
    for pod in _newest_first(kube.list("v1", "Pod", p.namespace, engine_selector(p.model))):
        exit_code = _check_exit(pod, image)
        if exit_code is None:
            continue
        meta = pod["metadata"]
        line = EngineCheck.from_log(kube.pod_log(meta["namespace"], meta["name"], CHECK_CONTAINER, 20))
        if line is None:
            continue
        p.engine = EngineStatus(
            image=image,
            sglang_version=line.sglangVersion,
            python=line.python,
            device=line.device,
            attention_backend=line.attentionBackend,
            amx=line.amx,
        )
        if exit_code != 0:
            found = f"SGLang {line.sglangVersion}" if line.sglangVersion else "no SGLang"
            p.condition(
                ConditionType.DEGRADED,
                True,
                "EngineCheckFailed",
                f"the serving image {image} ({found}) cannot serve this model: {line.problem}",
            )
            return True
        return False
    return False


def _newest_first(pods: list[Obj]) -> list[Obj]:
    return sorted(pods, key=lambda pod: str(pod["metadata"].get("creationTimestamp", "")), reverse=True)


def _check_exit(pod: Obj, image: str) -> int | None:
    """The exit code of the pod's finished engine-check, when it ran `image`; None otherwise."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") != CHECK_CONTAINER:
            continue
        spec_image = next(
            (
                c.get("image")
                for c in pod.get("spec", {}).get("initContainers") or []
                if c.get("name") == CHECK_CONTAINER
            ),
            image,
        )
        if spec_image != image:
            return None  # a pod of an earlier image, rolling away
        for state in (status.get("state") or {}, status.get("lastState") or {}):
            terminated = state.get("terminated")
            if terminated is not None:
                return int(terminated.get("exitCode", 1))
    return None
