"""The router's readiness means "can serve" (issue #40): the rendered readiness probe is a path on
which the real smg (the pinned wheel) answers 503 while no engine is healthy in its pool and 200 once
one is, while the liveness probe's path answers 200 throughout. A router probed on smg's /health was
Ready with nothing behind it and answered 404 model_not_found from the model's Service."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.router import ROUTER
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.gate_harness import closed_port_url
from tests.unit.render_inputs import body, plan, spec_of

KVANT = [sys.executable, "-m", "kvant_cli.main"]
SMG = shutil.which("smg", path=str(Path(sys.executable).parent))
WAIT_SECONDS = 60.0


def _router_probes() -> tuple[str, str]:
    """The rendered router container's readiness and liveness paths, for a model with three replicas."""
    model = body("tiny.yaml")
    model["spec"]["serving"]["replicas"] = 3
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings())
    (container,) = [
        c
        for o in serving_objects(inputs, None)
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        if c["name"] == ROUTER
    ]
    return container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError):
        return None


def _until(check: Callable[[], bool], what: str, procs: list[subprocess.Popen[Any]]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited early: {proc.communicate()!r}"
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {WAIT_SECONDS:.0f}s waiting for {what}")


def test_a_router_is_ready_only_while_an_engine_is_healthy_and_alive_throughout() -> None:
    assert SMG is not None, "smg is pinned in constraints.txt and installed in the venv"
    readiness, liveness = _router_probes()
    assert readiness != liveness, "a readiness probe on the liveness path is Ready with no engine"
    engine, router = closed_port_url(), closed_port_url()
    port = engine.rsplit(":", 1)[1]
    smg = [SMG, "launch", "--host", "127.0.0.1", "--port", router.rsplit(":", 1)[1]]
    smg += ["--worker-urls", engine, "--worker-startup-check-interval", "1"]
    smg += ["--prometheus-host", "127.0.0.1", "--prometheus-port", closed_port_url().rsplit(":", 1)[1]]
    procs = [subprocess.Popen(smg, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    try:
        # Its one engine is not up yet: alive, not ready.
        _until(lambda: _status(router + liveness) == 200, "smg to answer its liveness path", procs)
        assert _status(router + readiness) == 503
        sim = [*KVANT, "sim", "--model-name", "tiny", "--kv-tokens", "4000", "--port", port]
        procs.append(subprocess.Popen(sim, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        _until(lambda: _status(router + readiness) == 200, "smg to be ready once its engine is", procs)
        assert _status(router + liveness) == 200
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
