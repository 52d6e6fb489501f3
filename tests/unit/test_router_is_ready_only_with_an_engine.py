"""The router's readiness means "can serve" (issue #40): the rendered readiness probe is a path on
which the real smg (the pinned wheel) answers 503 while no engine is healthy in its pool and 200 once
one is, while the liveness probe's path answers 200 throughout. A router probed on smg's /health was
Ready with nothing behind it and answered 404 model_not_found from the model's Service."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.gate_harness import closed_port_url
from tests.unit.router_harness import SMG, http_status, rendered_router_pod, until

KVANT = [sys.executable, "-m", "kvant_cli.main"]


def _router_probes() -> tuple[str, str]:
    """The rendered router container's readiness and liveness paths, for a model with three replicas."""
    container = rendered_router_pod(3)["containers"][0]
    return container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]


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
        until(lambda: http_status(router + liveness) == 200, "smg to answer its liveness path", procs)
        assert http_status(router + readiness) == 503
        sim = [*KVANT, "sim", "--model-name", "tiny", "--kv-tokens", "4000", "--port", port]
        procs.append(subprocess.Popen(sim, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        until(lambda: http_status(router + readiness) == 200, "smg to be ready once its engine is", procs)
        assert http_status(router + liveness) == 200
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
