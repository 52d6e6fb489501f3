"""The serving pod is rendered to drain: the gate is told its drain ceiling, the engine waits in its
preStop hook until the gate has gone, and the grace period covers both; none of it follows the limits,
which must never roll the pods (kvant_contracts.drain)."""

from __future__ import annotations

import argparse

import pytest

from kvant_contracts.drain import (
    DRAIN_CEILING_SECONDS,
    GATE_CLOSE_SECONDS,
    POD_TERMINATION_GRACE_SECONDS,
    drain_wait_script,
)
from kvant_contracts.serving_pod import GATE_PORT, GATE_READINESS_PATH
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from kvant_runtime.gate import gate_command
from tests.unit.render_inputs import body, plan, spec_of

MODEL_DIR = Location(
    {"name": "artifacts", "persistentVolumeClaim": {"claimName": "kvant-artifacts"}}, "/artifacts", "k"
)


def _pod(example: str = "tiny.yaml", **overrides: object) -> dict:
    manifest = body(example, **overrides)
    spec = spec_of(manifest)
    inputs = ServingInputs(manifest, spec, plan(), MODEL_DIR, "sha256:x", OperatorSettings())
    pod: dict = deployment(inputs, roles(spec)[0])["spec"]["template"]["spec"]
    return pod


def _containers(pod: dict) -> dict[str, dict]:
    return {container["name"]: container for container in pod["containers"]}


@pytest.mark.parametrize(
    "example", ["tiny.yaml", "tinychat-cpu.yaml", "kimi-k2-int4-experts-fp8kv-8xh200.yaml"]
)
def test_the_engine_waits_for_the_gate_which_drains_within_the_grace_period(example: str) -> None:
    pod = _pod(example)
    engine, gate = _containers(pod)["engine"], _containers(pod)["gate"]
    args = gate["args"]
    drain = float(args[args.index("--drain-seconds") + 1])
    assert drain == DRAIN_CEILING_SECONDS
    assert gate["readinessProbe"]["httpGet"]["path"] == GATE_READINESS_PATH
    # The hook is the tested script (test_gate_drains_before_it_exits), bounded by the gate's drain
    # and its close, run by the image's own python3 (SGLang's image has no Kvant).
    hook = engine["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["python3", "-c", drain_wait_script(GATE_PORT, drain + GATE_CLOSE_SECONDS)]
    assert "lifecycle" not in gate  # signalled at once: it is the one that drains
    assert pod["terminationGracePeriodSeconds"] == POD_TERMINATION_GRACE_SECONDS > drain + GATE_CLOSE_SECONDS


def test_limits_that_lengthen_the_drain_render_the_same_pod() -> None:
    longer = _pod(limits={"queueTimeoutSeconds": 120, "defaultMaxTokens": 8192})
    assert longer == _pod()


def _gate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    gate_command.register(parser.add_subparsers())
    return parser


REQUIRED = ["gate", "--listen", "127.0.0.1:1", "--upstream", "http://127.0.0.1:2", "--limits", "x"]


def test_the_gate_takes_its_drain_ceiling_on_the_command_line() -> None:
    assert _gate_parser().parse_args([*REQUIRED, "--drain-seconds", "300"]).drain_seconds == 300.0
    assert _gate_parser().parse_args(REQUIRED).drain_seconds is None  # the gate's own default
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(SystemExit):
            _gate_parser().parse_args([*REQUIRED, "--drain-seconds", bad])
