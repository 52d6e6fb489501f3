"""The access Secrets reach the serving pods by name only: the gate mounts them as files, the SGLang
engine gets the admin token from the Secret by reference; nothing secret is in the rendered objects."""

from __future__ import annotations

import json

from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from tests.unit.render_inputs import body, plan, spec_of

ACCESS = {"adminTokenSecret": "tiny-admin", "apiKeysSecret": "tiny-keys"}
MODEL_DIR = Location({"name": "model", "emptyDir": {}}, "/artifacts", "abc")


def _pod(example: str, **overrides: object) -> dict:
    model = body(example, **overrides)
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), MODEL_DIR, "sha256:a", OperatorSettings())
    return deployment(inputs, roles(spec)[0])["spec"]["template"]["spec"]


def test_the_gate_mounts_both_secrets_and_the_engine_gets_the_admin_token() -> None:
    pod = _pod("kimi-k2-int4-experts-fp8kv-8xh200.yaml", access=ACCESS)
    engine, gate = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["admin-token"]["secret"] == {
        "secretName": "tiny-admin",
        "items": [{"key": "token", "path": "token"}],
    }
    assert volumes["api-keys"]["secret"]["secretName"] == "tiny-keys"
    args = gate["args"]
    assert args[args.index("--admin-token-file") + 1] == "/etc/kvant/access/admin-token/token"
    assert args[args.index("--api-keys-file") + 1] == "/etc/kvant/access/api-keys/keys"
    env = {e["name"]: e for e in engine["env"]}
    assert env["KVANT_ADMIN_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "tiny-admin", "key": "token"}}


def test_the_simulator_gets_no_token_and_no_access_means_no_secrets() -> None:
    engine, _ = _pod("tiny.yaml", access=ACCESS)["containers"]
    assert "KVANT_ADMIN_API_KEY" not in {e["name"] for e in engine.get("env", [])}
    plain = _pod("tiny.yaml")
    assert "secret" not in json.dumps(plain["volumes"])
    assert "--admin-token-file" not in plain["containers"][1]["args"]
