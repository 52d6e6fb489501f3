"""How the launcher reaches the user's SGLang image: a zipapp in an emptyDir, checked, then run.

The engine container runs `spec.serving.image`, which carries SGLang but not Kvant. Two init
containers come first: `launcher` (the runtime image) writes `kvant launch` as a stdlib-only zipapp
into the pod's `launcher` emptyDir, and `engine-check` (the serving image, its own Python) validates
the command line with that image's SGLang and prints the version it found (`EngineCheck`), which
the serving step reads into `status.engine`. A version the launcher cannot drive, or flags the
image's SGLang refuses, stop the pod there with a message the operator shows as Degraded, before a
GPU loads a byte of weights.
"""

from __future__ import annotations

from kvant_contracts.kube_object import Obj

LAUNCHER_DIR = "/kvant-launcher"
PYZ = f"{LAUNCHER_DIR}/kvant-launch.pyz"
# SGLang's images (lmsysorg/sglang, and those built on them) put their Python on PATH as python3.
IMAGE_PYTHON = "python3"
CHECK_CONTAINER = "engine-check"
VOLUME: Obj = {"name": "launcher", "emptyDir": {}}
_MOUNT: Obj = {"name": "launcher", "mountPath": LAUNCHER_DIR}


def engine_command(container: Obj, spec_json: str) -> Obj:
    """`container` (the engine) running the launcher from the emptyDir with the image's Python."""
    container["command"] = [IMAGE_PYTHON, PYZ]
    container["args"] = ["launch", "--spec-json", spec_json]
    container["volumeMounts"] = [*container.get("volumeMounts", []), {**_MOUNT, "readOnly": True}]
    return container


def init_containers(runtime_image: str, engine: Obj) -> list[Obj]:
    """Write the zipapp, then check the engine's command line in the engine's own image."""
    write = {
        "name": "launcher",
        "image": runtime_image,
        "command": ["kvant"],
        "args": ["launch-zipapp", PYZ],
        "volumeMounts": [_MOUNT],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    check = {
        "name": CHECK_CONTAINER,
        "image": engine["image"],
        "command": engine["command"],
        "args": [*engine["args"], "--check"],
        "volumeMounts": engine["volumeMounts"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
    }
    return [write, check]
