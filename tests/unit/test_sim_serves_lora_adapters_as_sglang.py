"""The simulator's stand-in for SGLang's LoRA adapter API (kvant_runtime.sim.adapters): load and
unload with SGLang's bodies, answers and refusals; a request names its adapter as SGLang reads it;
an adapter never loaded is a 400, and one unloaded comes back on its next request, as in SGLang.
What SGLang does is read from its source: docs/design/adapters-research.md, sections 2, 3 and 5."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from kvant_contracts.lora import LoraEnvelope, LoraTarget
from kvant_runtime.sim.adapters import ADAPTER_CONFIG, AdapterRegistry
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving

FAST = CostModel(decode_base_s=0.0005, decode_per_request_s=0.0, prefill_per_token_s=0.0)
POOL = LoraEnvelope(
    max_rank=16, targets=(LoraTarget.Q_PROJ, LoraTarget.V_PROJ, LoraTarget.O_PROJ), slots=3, max_loaded=3
)


def simulator(envelope: LoraEnvelope | None = POOL) -> SimServer:
    config = EngineConfig(kv_tokens=2000, max_running_requests=32, context_length=4096, seed=0, cost=FAST)
    return SimServer(Engine(config), ServerInfo("base"), adapters=AdapterRegistry(envelope))


def adapter(root: Path, name: str, **config: Any) -> str:
    folder = root / name
    folder.mkdir()
    fields = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], **config}
    (folder / ADAPTER_CONFIG).write_text(json.dumps(fields))
    return str(folder)


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json()


def test_loaded_adapters_serve_by_either_name_and_an_unknown_one_is_a_400(tmp_path: Path):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session, serving(simulator().app()) as url:
            status, loaded = await post(
                session,
                url + "/load_lora_adapter",
                {"lora_name": "sql", "lora_path": adapter(tmp_path, "sql")},
            )
            assert status == 200 and loaded["success"] is True and loaded["error_message"] is None
            assert loaded["loaded_adapters"] == {"sql": str(tmp_path / "sql")}
            for body in (
                {**chat, "model": "base:sql"},
                {**chat, "model": "anything:sql"},
                {**chat, "lora_path": "sql"},
            ):
                status, answer = await post(session, url + "/v1/chat/completions", body)
                assert status == 200, answer
            assert (await post(session, url + "/generate", {"text": "hi", "lora_path": "sql"}))[0] == 200
            # Native /generate reads lora_path only: a `model` there selects nothing, as in SGLang.
            assert (await post(session, url + "/generate", {"text": "hi", "model": "base:nope"}))[0] == 200
            status, refused = await post(
                session, url + "/v1/chat/completions", {**chat, "model": "base:nope"}
            )
            assert status == 400 and "Got LoRA adapter that has never been loaded: nope" in refused["message"]
            async with session.get(url + "/v1/models") as resp:
                cards = (await resp.json())["data"]
            assert [c["id"] for c in cards] == ["base", "sql"]
            assert cards[1]["parent"] == "base" and cards[1]["root"] == str(tmp_path / "sql")

    run(scenario())


def test_unload_frees_the_name_but_a_request_loads_it_again_as_sglang_does(tmp_path: Path):
    async def scenario() -> None:
        async with aiohttp.ClientSession() as session, serving(simulator().app()) as url:
            path = adapter(tmp_path, "sql")
            assert (await post(session, url + "/load_lora_adapter", {"lora_name": "sql", "lora_path": path}))[
                0
            ] == 200
            status, unloaded = await post(session, url + "/unload_lora_adapter", {"lora_name": "sql"})
            assert status == 200 and unloaded["loaded_adapters"] == {}
            status, again = await post(session, url + "/unload_lora_adapter", {"lora_name": "sql"})
            assert status == 400 and again["success"] is False and "does not exist" in again["error_message"]
            # SGLang's tokenizer manager keeps every name it loaded and reloads it on a request:
            # unloading does not revoke a name (the gate must refuse it).
            assert (await post(session, url + "/generate", {"text": "hi", "lora_path": "sql"}))[0] == 200
            async with session.get(url + "/v1/models") as resp:
                assert [c["id"] for c in (await resp.json())["data"]] == ["base", "sql"]

    run(scenario())


def test_what_sglang_refuses_to_load_is_a_400_with_its_reason(tmp_path: Path):
    cases = [
        ("rank", adapter(tmp_path, "rank", r=32), "with rank 32 is incompatible"),
        ("mlp", adapter(tmp_path, "mlp", target_modules=["q_proj", "down_proj"]), "is incompatible"),
        ("dora", adapter(tmp_path, "dora", use_dora=True), "DoRA"),
        ("ia3", adapter(tmp_path, "ia3", peft_type="IA3"), "is not LORA"),
        ("empty", str(tmp_path), "cannot read"),
    ]

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session, serving(simulator().app()) as url:
            for name, path, reason in cases:
                status, answer = await post(
                    session, url + "/load_lora_adapter", {"lora_name": name, "lora_path": path}
                )
                assert status == 400 and answer["success"] is False and reason in answer["error_message"], (
                    answer
                )
            # A whole stack counts as its buffer (k_proj shares q/v's): fits; the same name twice does not.
            fits = adapter(tmp_path, "qkv", target_modules=["model.layers.0.self_attn.k_proj", "o_proj"])
            assert (await post(session, url + "/load_lora_adapter", {"lora_name": "qkv", "lora_path": fits}))[
                0
            ] == 200
            status, twice = await post(
                session, url + "/load_lora_adapter", {"lora_name": "qkv", "lora_path": fits}
            )
            assert status == 400 and "already loaded" in twice["error_message"]
            status, bad = await post(session, url + "/load_lora_adapter", {"lora_name": "x"})
            assert status == 400 and "lora_path" in bad["message"]

    run(scenario())


def test_past_max_loaded_the_least_recently_used_unpinned_adapter_goes(tmp_path: Path):
    registry = AdapterRegistry(POOL)  # 3 slots, 3 held at once
    registry.load("a", adapter(tmp_path, "a"), pinned=True)
    registry.load("b", adapter(tmp_path, "b"))
    registry.load("c", adapter(tmp_path, "c"))
    registry.resolve({"lora_path": "b"}, "base")  # b used after c
    registry.load("d", adapter(tmp_path, "d"))
    assert list(registry.loaded) == ["a", "b", "d"]  # c went; a is pinned
    # Pinning may not take the last free slot (SGLang keeps one for unpinned adapters and the base):
    # with 3 slots a second pinned adapter is allowed, a third is not.
    registry.load("e", adapter(tmp_path, "e"), pinned=True)
    assert list(registry.loaded) == ["a", "d", "e"]  # b was least recently used now
    refused = None
    try:
        registry.load("f", adapter(tmp_path, "f"), pinned=True)
    except ValueError as error:
        refused = str(error)
    assert refused is not None and "not allowed to pin all slots" in refused


def test_an_engine_without_lora_refuses_adapters_as_sglang_does(tmp_path: Path):
    async def scenario() -> None:
        async with aiohttp.ClientSession() as session, serving(simulator(None).app()) as url:
            status, answer = await post(
                session, url + "/load_lora_adapter", {"lora_name": "a", "lora_path": adapter(tmp_path, "a")}
            )
            assert status == 400 and "LoRA is not enabled" in answer["error_message"]
            status, refused = await post(session, url + "/generate", {"text": "hi", "lora_path": "a"})
            assert status == 400 and "LoRA is not enabled" in refused["message"]
            assert (await post(session, url + "/generate", {"text": "hi", "model": "base"}))[0] == 200

    run(scenario())


def test_kvant_sim_takes_sglangs_lora_flags_and_refuses_what_sglang_refuses():
    def sim(*flags: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "kvant_cli.main",
            "sim",
            "--model-name",
            "m",
            "--kv-tokens",
            "100",
            *flags,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    missing = sim("--enable-lora", "--max-lora-rank", "8")
    assert missing.returncode == 2 and "--lora-target-modules" in missing.stderr
    below = sim(
        "--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "q_proj", "--max-loaded-loras", "2"
    )
    assert (
        below.returncode == 2
        and "--max-loaded-loras 2 must be at least --max-loras-per-batch" in below.stderr
    )
    unknown = sim("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "lm_head")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_a_batch_runs_at_most_its_slots_of_adapters_and_a_request_that_does_not_fit_waits():
    """SGLang's get_new_batch_prefill with can_schedule_lora_req: 2 slots, the base model counting as
    one, so b waits while the a request behind it runs; b runs once the batch has a slot."""
    engine = Engine(
        EngineConfig(
            kv_tokens=10_000, max_running_requests=16, context_length=4096, adapter_slots=2, cost=FAST
        )
    )
    submitted = {
        name: engine.submit(name, 10, 2, 0.0, name, ignore_eos=True, adapter=adapter)
        for name, adapter in (("base", None), ("a1", "a"), ("b1", "b"), ("a2", "a"))
    }
    first = engine.step(0.0)
    assert first is not None and first.kind == "prefill"
    assert {r.rid for r in engine.running} == {"base", "a1", "a2"}
    assert engine.waiting == [submitted["b1"]]
    now = first.end
    while engine.waiting:
        step = engine.step(now)
        assert step is not None
        now = step.end
    assert submitted["b1"] in engine.running and all(r.finished for r in (submitted["a1"], submitted["a2"]))
    unlimited = Engine(
        EngineConfig(kv_tokens=10_000, max_running_requests=16, context_length=4096, cost=FAST)
    )
    for name, adapter in (("base", None), ("a1", "a"), ("b1", "b")):
        unlimited.submit(name, 10, 2, 0.0, name, adapter=adapter)
    unlimited.step(0.0)
    assert len(unlimited.running) == 3 and not unlimited.waiting  # LoRA off: no slot rule
