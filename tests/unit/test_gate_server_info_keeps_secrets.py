"""SGLang's server info goes through the gate without the admin token and API key it carries.

The engine's answer here is what SGLang 0.5.23 itself builds for `/server_info`: its own parser's
`ServerArgs.resolved_dict()` for the command line the launcher gives a model with an admin token,
plus that command line. SGLang redacts neither; the gate must.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web

from kvant_runtime.gate.server_info import redact
from kvant_runtime.launch.validate import validate_argv
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, run, serving

ADMIN, KEY = "adm-0123456789abcdef", "sk-engine-key-42"
PASSWORD = "ssl-pass-7"
ARGV = [
    *("--model-path", "/models/m", "--device", "cpu", "--admin-api-key", ADMIN, f"--api-key={KEY}"),
    *("--ssl-keyfile-password", PASSWORD),
]


def _sglang_server_info() -> dict[str, Any]:
    info: dict[str, Any] = validate_argv(ARGV, []).resolved_dict()
    info["launch_command"] = "python -m sglang.launch_server " + " ".join(ARGV)
    info["internal_states"] = [{"admin_api_key": ADMIN, "last_gen_throughput": 1.5}]
    return info


def test_sglang_itself_answers_its_secrets_in_plain_text():
    """The premise: without the gate, a client that reads /server_info holds the admin token."""
    info = _sglang_server_info()
    assert (info["admin_api_key"], info["api_key"], info["ssl_keyfile_password"]) == (ADMIN, KEY, PASSWORD)


def test_the_gate_relays_server_info_with_every_secret_redacted(tmp_path):
    info = _sglang_server_info()

    async def answer(_request: web.Request) -> web.Response:
        return web.json_response(info)

    engine = web.Application()
    engine.router.add_get("/server_info", answer)
    engine.router.add_get("/get_server_info", answer)

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with (
            serving(engine) as upstream,
            gate_in_front_of(upstream, limits) as (_gate, url),
            aiohttp.ClientSession() as client,
        ):
            for path in ("/server_info", "/get_server_info"):
                async with client.get(url + path) as resp:
                    assert resp.status == 200
                    text = await resp.text()
                assert ADMIN not in text and KEY not in text and PASSWORD not in text, path
                seen = json.loads(text)
                assert (seen["admin_api_key"], seen["api_key"]) == ("REDACTED", "REDACTED")
                assert seen["internal_states"][0]["admin_api_key"] == "REDACTED"
                assert "--admin-api-key REDACTED" in seen["launch_command"]
                assert "--api-key=REDACTED" in seen["launch_command"]
                assert "--ssl-keyfile-password REDACTED" in seen["launch_command"]
                # What routers and dashboards read stays.
                assert seen["model_path"] == "/models/m"
                assert seen["internal_states"][0]["last_gen_throughput"] == 1.5

    run(scenario())


def test_an_answer_that_is_not_json_is_not_relayed():
    try:
        redact(b"admin_api_key=" + ADMIN.encode())
    except ValueError:
        return
    raise AssertionError("a body the gate cannot read must not be relayed")
