"""Who is asking: the API-keys file names a key's tenant and class; the tenant and priority headers
count only from a trusted source (a gateway's key marked `trusted`, or the admin token), and a key's
own tenant= and priority= always win. Over HTTP, the identity reaches admission and its metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kvant_contracts.tenancy import (
    DEADLINE_HEADER,
    ENGINE_PRIORITY,
    OVERRIDE_PRIORITY_HEADER,
    PRIORITY_HEADER,
    TENANT_HEADER,
)
from kvant_runtime.gate.access import Access, Identity
from tests.unit.gate_harness import KubeletLimitsDir, gate_metric, held_engine_behind_gate, run, until

CLAIM = {TENANT_HEADER: "someone-else", PRIORITY_HEADER: "critical"}


def _access(tmp_path: Path, *key_lines: str, admin: bool = True) -> Access:
    keys = tmp_path / "keys"
    keys.write_text("".join(f"{line}\n" for line in key_lines))
    token = tmp_path / "token"
    token.write_text("admin-token\n")
    return Access(token if admin else None, keys)


def _bearer(secret: str) -> str:
    return f"Bearer {secret}"


def test_an_untrusted_key_cannot_claim_a_tenant_or_a_class(tmp_path: Path) -> None:
    access = _access(tmp_path, "plain-key", "team-key tenant=team-a priority=sheddable")
    assert access.identify("/generate", _bearer("plain-key"), CLAIM) == Identity("default", None, False)
    # The key's own tenant and class hold; the headers change nothing.
    assert access.identify("/generate", _bearer("team-key"), CLAIM) == Identity("team-a", "sheddable", False)


def test_no_key_is_no_identity_and_without_a_keys_file_headers_are_ignored(tmp_path: Path) -> None:
    access = _access(tmp_path, "plain-key")
    assert access.identify("/generate", None, CLAIM) is None
    assert access.identify("/generate", _bearer("wrong"), CLAIM) is None
    assert not access.client_allowed("/generate", _bearer("wrong"))
    open_to_all = Access(tmp_path / "token", None)
    assert open_to_all.identify("/generate", None, CLAIM) == Identity()  # anyone may send headers
    assert open_to_all.identify("/generate", _bearer("whatever"), CLAIM) == Identity()
    # The admin token is trusted there too: it could do more than pick a tenant.
    assert open_to_all.identify("/generate", _bearer("admin-token"), CLAIM) == Identity(
        "someone-else", "critical", True
    )


def test_a_trusted_key_speaks_for_its_clients_but_its_own_settings_win(tmp_path: Path) -> None:
    access = _access(
        tmp_path,
        "gateway-key trusted",
        "pinned-gateway trusted tenant=team-b priority=standard",
    )
    assert access.identify("/generate", _bearer("gateway-key"), CLAIM) == Identity(
        "someone-else", "critical", True
    )
    assert access.identify("/generate", _bearer("gateway-key"), {}) == Identity("default", None, True)
    assert access.identify("/generate", _bearer("pinned-gateway"), CLAIM) == Identity(
        "team-b", "standard", True
    )
    # An invalid header value is ignored, not believed.
    bad = {TENANT_HEADER: "no spaces allowed", PRIORITY_HEADER: "urgent"}
    assert access.identify("/generate", _bearer("gateway-key"), bad) == Identity("default", None, True)
    assert access.identify("/generate", _bearer("admin-token"), CLAIM) == Identity(
        "someone-else", "critical", True
    )


def test_a_key_line_that_does_not_parse_holds_no_key(tmp_path: Path) -> None:
    access = _access(tmp_path, "good-key", "typo-key priority=urgent", "odd-key colour=blue")
    assert access.identify("/generate", _bearer("good-key"), {}) is not None
    assert access.identify("/generate", _bearer("typo-key"), {}) is None
    assert access.identify("/generate", _bearer("odd-key"), {}) is None


def test_the_identity_reaches_admission_over_http(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        # worstCase: each request reserves its whole output limit, whatever the forecast learns.
        tenancy = {"tenants": [{"name": "metered", "tokensPerMinute": 100}]}
        limits.write({"admission": "worstCase", "tenancy": tenancy})
        keys = tmp_path / "keys"
        keys.write_text("client-key tenant=team-a\ngateway-key trusted\nmetered-key tenant=metered\n")
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 60}}
        async with held_engine_behind_gate(limits, api_keys_file=keys) as (engine, _gate, url, session):
            engine.release.set()
            for key, headers in (
                ("client-key", CLAIM),  # untrusted: counted as its own tenant
                ("gateway-key", {TENANT_HEADER: "team-c", PRIORITY_HEADER: "sheddable"}),
            ):
                auth = {"Authorization": _bearer(key), **headers}
                async with session.post(url + "/generate", json=body, headers=auth) as resp:
                    assert resp.status == 200
            admitted = "kvant_gate_tenant_admitted_tokens_total"
            assert (await gate_metric(session, url, admitted, tenant="team-a", priority="standard") or 0) > 0
            assert (await gate_metric(session, url, admitted, tenant="team-c", priority="sheddable") or 0) > 0
            assert await gate_metric(session, url, admitted, tenant="someone-else") is None

            # A bad deadline header is the client's mistake: 400, in the gate's error shape.
            auth = {"Authorization": _bearer("client-key"), DEADLINE_HEADER: "soon"}
            async with session.post(url + "/generate", json=body, headers=auth) as resp:
                assert resp.status == 400
                assert DEADLINE_HEADER in (await resp.json())["error"]["message"]

            # A tenant over its tokensPerMinute: 429 with Retry-After, counted for that tenant.
            auth = {"Authorization": _bearer("metered-key")}
            async with session.post(url + "/generate", json=body, headers=auth) as resp:
                assert resp.status == 200  # a minute's worth of tokens, from a full bucket
            async with session.post(url + "/generate", json=body, headers=auth) as resp:
                assert resp.status == 429
                assert int(resp.headers["Retry-After"]) >= 1
                error = (await resp.json())["error"]
                assert error["type"] == "tenant_rate"
                assert error["code"] == 429
            rejected = "kvant_gate_tenant_rejected_total"
            assert (
                await gate_metric(
                    session, url, rejected, tenant="metered", priority="standard", reason="tenant_rate"
                )
                == 1
            )
            assert await gate_metric(session, url, "kvant_gate_rejected_total", reason="tenant_rate") == 1

    run(scenario())


def test_the_deadline_header_reaches_admission_and_is_refused_in_the_gates_shape(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 1, "concurrency": {"min": 1, "max": 1}, "retryAfterSeconds": 2})
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
        async with held_engine_behind_gate(limits) as (engine, _gate, url, session):
            holding = asyncio.create_task(session.post(url + "/generate", json=body))
            await until(lambda: engine.running == 1, "the first request to reach the engine")
            # No time left and no slot free: refused at once, not after queueTimeoutSeconds.
            async with session.post(url + "/generate", json=body, headers={DEADLINE_HEADER: "0"}) as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "2"
                error = (await resp.json())["error"]
                assert (error["type"], error["code"]) == ("deadline", 429)
            assert engine.running == 1
            engine.release.set()
            async with await holding as resp:
                assert resp.status == 200
            rejected = "kvant_gate_tenant_rejected_total"
            labels = {"tenant": "default", "priority": "standard", "reason": "deadline"}
            assert await gate_metric(session, url, rejected, **labels) == 1

    run(scenario())


def test_a_clients_own_engine_priority_does_not_change_its_class(tmp_path: Path) -> None:
    """SGLang orders its queue by the body's `priority` and lets `x-override-priority` overrule it:
    the gate writes the class's value over the one and never forwards the other, so the engine sees
    each request's class and nothing a client chose."""

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"tenancy": {"tenants": [{"name": "batch", "priority": "sheddable"}]}})
        keys = tmp_path / "keys"
        keys.write_text("client-key tenant=team-a\nbatch-key tenant=batch\ngateway-key trusted\n")
        jump = {OVERRIDE_PRIORITY_HEADER: "999"}
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}, "priority": 999}
        async with held_engine_behind_gate(limits, api_keys_file=keys) as (engine, _gate, url, session):
            engine.release.set()
            for key, headers in (
                ("client-key", jump),  # the default class, standard
                ("batch-key", jump),  # its tenant's class, sheddable
                ("gateway-key", {**jump, PRIORITY_HEADER: "critical"}),  # a trusted source's class
            ):
                auth = {"Authorization": _bearer(key), **headers}
                async with session.post(url + "/generate", json=body, headers=auth) as resp:
                    assert resp.status == 200
            classes = [ENGINE_PRIORITY[c] for c in ("standard", "sheddable", "critical")]
            assert [b["priority"] for b in engine.bodies] == classes
            assert not any(OVERRIDE_PRIORITY_HEADER in h for h in engine.headers), engine.headers
            assert [b["sampling_params"] for b in engine.bodies] == [body["sampling_params"]] * 3

    run(scenario())
