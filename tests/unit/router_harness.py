"""What the router unit tests share: the rendered router pod, the real smg beside them, and polling
its HTTP paths."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.router import ROUTER
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of

SMG = shutil.which("smg", path=str(Path(sys.executable).parent))  # the pinned wheel's
WAIT_SECONDS = 60.0


def rendered_router_pod(replicas: int) -> dict[str, Any]:
    """The router Deployment's pod spec for the tiny example served by `replicas` replicas."""
    model = body("tiny.yaml")
    model["spec"]["serving"]["replicas"] = replicas
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings())
    (pod,) = [
        o["spec"]["template"]["spec"]
        for o in serving_objects(inputs, None)
        if o["kind"] == "Deployment" and o["spec"]["template"]["spec"]["containers"][0]["name"] == ROUTER
    ]
    return pod


def http_status(url: str) -> int | None:
    """The status `url` answers GET with; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError):
        return None


def until(check: Callable[[], bool], what: str, procs: Sequence[subprocess.Popen[Any]] = ()) -> None:
    """Polls `check` for WAIT_SECONDS; fails at once if one of `procs` has exited."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited early: {proc.communicate()!r}"
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {WAIT_SECONDS:.0f}s waiting for {what}")
