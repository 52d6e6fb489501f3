"""The access Secrets at the gate: admin routes open only to the admin token, client keys required
when configured (401 otherwise, counted), health and metrics always open, and a rotated key works
without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp

from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, gate_metric, held_engine, run


def _secret(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_the_admin_token_opens_admin_routes_and_nothing_else_does(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        token = _secret(tmp_path / "token", "s3cret-admin")
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, limits, admin_token_file=token) as (
                _gate,
                url,
            ),
        ):
            async with aiohttp.ClientSession() as session:
                for presented in (None, "Bearer wrong", "s3cret-admin", "Basic s3cret-admin"):
                    headers = {"Authorization": presented} if presented else {}
                    async with session.post(url + "/flush_cache", headers=headers) as resp:
                        assert resp.status == 403, presented
                        assert "need the model's admin token" in (await resp.json())["error"]["message"]
                good = {"Authorization": "Bearer s3cret-admin"}
                async with session.post(url + "/flush_cache", headers=good) as resp:
                    assert resp.status == 200
            assert [seen for seen in engine.seen if seen[1] == "/flush_cache"] == [("POST", "/flush_cache")]

    run(scenario())


def test_client_keys_are_required_when_configured_and_rotate_live(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        keys = _secret(tmp_path / "keys", "key-one", "key-two")
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, limits, api_keys_file=keys) as (
                _gate,
                url,
            ),
        ):
            engine.release.set()
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/generate", json=body) as resp:
                    assert resp.status == 401
                wrong = {"Authorization": "Bearer nope"}
                async with session.get(url + "/get_server_info", headers=wrong) as resp:
                    assert resp.status == 401
                # The model list needs no key: the router reads it, with none, to register this gate.
                async with session.get(url + "/v1/models") as resp:
                    assert resp.status == 200
                for key in ("key-one", "key-two"):
                    auth = {"Authorization": f"Bearer {key}"}
                    async with session.post(url + "/generate", json=body, headers=auth) as resp:
                        assert resp.status == 200
                async with session.get(url + "/health") as resp:
                    assert resp.status == 200  # probes carry no secrets
                assert (
                    await gate_metric(session, url, "kvant_gate_rejected_total", reason="unauthorized") == 2
                )

                _secret(keys, "key-three")  # the kubelet refreshed the Secret volume
                stat = keys.stat()
                os.utime(keys, (stat.st_atime, stat.st_mtime + 5))
                async with session.post(
                    url + "/generate", json=body, headers={"Authorization": "Bearer key-one"}
                ) as r:
                    assert r.status == 401
                async with session.post(
                    url + "/generate", json=body, headers={"Authorization": "Bearer key-three"}
                ) as r:
                    assert r.status == 200

    run(scenario())


def test_without_secrets_admin_routes_stay_closed_and_clients_need_no_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, limits) as (_gate, url),
            aiohttp.ClientSession() as session,
        ):
            async with session.post(url + "/flush_cache", headers={"Authorization": "Bearer x"}) as resp:
                assert resp.status == 403
                assert "admin routes are closed" in (await resp.json())["error"]["message"]
            async with session.get(url + "/v1/models") as resp:
                assert resp.status == 200

    run(scenario())
