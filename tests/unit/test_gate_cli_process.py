"""`kvant gate` as a process: clear start-up errors, serving in front of `kvant sim`, clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kvant_contracts.limits import Limits, parse_limits, render_limits
from tests.unit.gate_harness import closed_port_url

KVANT = [sys.executable, "-m", "kvant_cli.main"]
WAIT_SECONDS = 60.0


def _wait_http(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args!r} exited early: {proc.communicate()!r}"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_a_bad_limits_file_stops_start_up_naming_file_and_field(tmp_path: Path):
    limits = tmp_path / "limits.yaml"
    limits.write_text(render_limits(Limits()).replace("maxConcurrency: 64", "maxConcurrency: -3"))
    listen = closed_port_url().removeprefix("http://")
    result = subprocess.run(
        [*KVANT, "gate", "--listen", listen, "--upstream", "http://127.0.0.1:1", "--limits", str(limits)],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=False,
    )
    assert result.returncode == 2
    assert f"{limits}: maxConcurrency must be a whole number ≥ 1, got -3" in result.stderr
    assert "Traceback" not in result.stderr


def test_gate_process_serves_the_simulator_and_stops_on_sigterm(tmp_path: Path):
    limits = tmp_path / "limits.yaml"
    limits.write_text(render_limits(parse_limits({"maxConcurrency": 4})))
    sim_url, gate_url, metrics_url = closed_port_url(), closed_port_url(), closed_port_url()
    sim = subprocess.Popen(
        [*KVANT, "sim", "--model-name", "tiny", "--kv-tokens", "4000", "--port", sim_url.rsplit(":", 1)[1]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    gate = subprocess.Popen(
        [
            *KVANT,
            "gate",
            "--listen",
            gate_url.removeprefix("http://"),
            "--upstream",
            sim_url,
            "--limits",
            str(limits),
            "--metrics-listen",
            metrics_url.removeprefix("http://"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_http(sim_url + "/health", sim)
        _wait_http(gate_url + "/health", gate)
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        request = urllib.request.Request(
            gate_url + "/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as resp:
            answer = json.loads(resp.read())
        assert answer["usage"]["completion_tokens"] == 3
        with urllib.request.urlopen(metrics_url + "/metrics", timeout=WAIT_SECONDS) as resp:
            metrics = resp.read().decode()
        assert "kvant_gate_admitted_total 1.0" in metrics
        with urllib.request.urlopen(gate_url + "/metrics", timeout=WAIT_SECONDS) as resp:
            assert "sglang:token_usage" in resp.read().decode()  # the engine's metrics pass through
        gate.send_signal(signal.SIGTERM)
        output, _ = gate.communicate(timeout=WAIT_SECONDS)
        assert gate.returncode == 0, output
        assert "event=gate_started" in output and "event=gate_stopped" in output
    finally:
        for proc in (gate, sim):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_a_limits_configmap_outside_a_pod_leaves_the_gate_on_its_file(tmp_path: Path):
    """--limits-configmap without the in-cluster environment: said once, and the gate serves from the file."""
    limits = tmp_path / "limits.yaml"
    limits.write_text(render_limits(parse_limits({"maxConcurrency": 4})))
    gate_url = closed_port_url()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    argv = [*KVANT, "gate", "--listen", gate_url.removeprefix("http://"), "--upstream", closed_port_url()]
    argv += ["--limits", str(limits), "--limits-configmap", "serving/tiny-limits"]
    gate = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        _wait_http(gate_url + "/gate/metrics", gate)
        gate.send_signal(signal.SIGTERM)
        output, _ = gate.communicate(timeout=WAIT_SECONDS)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.communicate()
    assert "event=limits_api_disabled following=file" in output and "KUBERNETES_SERVICE_HOST" in output
    assert "limits_configmap=none" in output and "Traceback" not in output


def test_a_malformed_limits_configmap_is_refused_at_the_command_line():
    argv = [*KVANT, "gate", "--listen", "127.0.0.1:1", "--upstream", "http://127.0.0.1:2", "--limits", "x"]
    result = subprocess.run(
        [*argv, "--limits-configmap", "tiny-limits"],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=False,
    )
    assert result.returncode == 2
    assert "expected NAMESPACE/NAME such as serving/tiny-limits, got 'tiny-limits'" in result.stderr
