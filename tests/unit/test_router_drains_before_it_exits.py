"""A leaving router drops nothing: the rendered router gives smg the gate's drain ceiling as its
shutdown grace and the pod a termination grace that covers it, and the real smg (the pinned wheel),
signalled with SIGTERM while it carries an answer, turns not-ready, finishes the answer and only then
exits. Before, smg kept its 180 s default and the pod Kubernetes' 30 s, so deleting a router (a roll,
scale-in, a node drain) cut every answer it carried that was longer than ~25 s."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

from kvant_contracts.drain import DRAIN_CEILING_SECONDS, POD_TERMINATION_GRACE_SECONDS
from kvant_operator.render.router import ROUTER_LIVENESS_PATH, ROUTER_READINESS_PATH
from tests.unit.gate_harness import closed_port_url
from tests.unit.router_harness import SMG, WAIT_SECONDS, http_status, rendered_router_pod, until

KVANT = [sys.executable, "-m", "kvant_cli.main"]
GRACE_FLAG = "--shutdown-grace-period-secs"
# At the simulator's 20 ms a step ~8 s: the answer outlives smg's 5 s settle window after the signal,
# so it is the drain, not the settle window, that lets it finish.
ANSWER_TOKENS = 400


def test_the_router_is_rendered_to_outlast_the_answers_it_carries() -> None:
    pod = rendered_router_pod(2)
    args = pod["containers"][0]["args"]
    grace = int(args[args.index(GRACE_FLAG) + 1])
    assert grace == DRAIN_CEILING_SECONDS, "a router carries answers as long as the gate drains"
    assert pod["terminationGracePeriodSeconds"] == POD_TERMINATION_GRACE_SECONDS > grace


def test_smg_signalled_while_it_carries_an_answer_finishes_it_then_exits() -> None:
    assert SMG is not None, "smg is pinned in constraints.txt and installed in the venv"
    args = rendered_router_pod(2)["containers"][0]["args"]
    grace = args[args.index(GRACE_FLAG) + 1]
    engine, router = closed_port_url(), closed_port_url()
    sim = [*KVANT, "sim", "--model-name", "tiny", "--kv-tokens", "4000", "--decode-base-ms", "20"]
    sim += ["--port", engine.rsplit(":", 1)[1]]
    smg = [SMG, "launch", "--host", "127.0.0.1", "--port", router.rsplit(":", 1)[1]]
    smg += ["--worker-urls", engine, "--worker-startup-check-interval", "1", GRACE_FLAG, grace]
    smg += ["--prometheus-host", "127.0.0.1", "--prometheus-port", closed_port_url().rsplit(":", 1)[1]]
    engine_proc = subprocess.Popen(sim, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    router_proc = subprocess.Popen(smg, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    answer: dict[str, Any] = {}

    def ask() -> None:
        sampling = {"max_new_tokens": ANSWER_TOKENS, "min_new_tokens": ANSWER_TOKENS}
        request = urllib.request.Request(
            f"{router}/generate",
            data=json.dumps({"text": "hello", "sampling_params": sampling}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                answer.update(status=response.status, body=json.load(response), at=time.monotonic())
        except OSError as error:
            answer.update(error=repr(error), at=time.monotonic())

    try:
        until(lambda: http_status(router + ROUTER_READINESS_PATH) == 200, "smg to be ready with its engine")
        client = threading.Thread(target=ask)
        client.start()
        time.sleep(1.0)  # the answer is under way
        router_proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        until(lambda: http_status(router + ROUTER_READINESS_PATH) == 503, "smg to turn not-ready")
        assert http_status(router + ROUTER_LIVENESS_PATH) == 200, "draining, not dead: liveness holds"
        client.join(timeout=WAIT_SECONDS)
        assert answer.get("status") == 200, answer
        assert answer["body"]["meta_info"]["completion_tokens"] == ANSWER_TOKENS
        print(f"the answer ended {answer['at'] - signalled:.1f} s after the signal")
        router_proc.wait(timeout=WAIT_SECONDS)  # then it leaves, long before its grace
    finally:
        for proc in (router_proc, engine_proc):
            proc.kill()
            proc.wait(timeout=10)
