"""The simulator's `GET /v1/loads` is SGLang 0.5.23's: a snapshot published on every prefill batch,
every 15 decode steps and at idle, so a gate reading it sees the lag it would see on SGLang."""

from __future__ import annotations

from kvant_runtime.gate.engine_load import parse_loads
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.load_snapshot import PUBLISH_INTERVAL, LoadSnapshots


def _published(snapshots: LoadSnapshots) -> dict[str, int]:
    load = snapshots.current
    return {name: load[name] for name in ("num_running_reqs", "num_waiting_reqs", "num_used_tokens")}


def test_the_snapshot_moves_on_prefill_every_fifteenth_decode_step_and_at_idle():
    engine = Engine(EngineConfig(kv_tokens=1000, max_running_requests=8, context_length=1000))
    snapshots = LoadSnapshots(engine, "test")
    engine.submit("a", 10, 40, 0.0, "a")
    snapshots.after_step(None)  # nothing ran yet: the idle publish shows it waiting
    assert _published(snapshots) == {"num_running_reqs": 0, "num_waiting_reqs": 1, "num_used_tokens": 0}
    step = engine.step(0.0)
    assert step is not None and step.kind == "prefill"
    snapshots.after_step(step.kind)
    assert _published(snapshots)["num_running_reqs"] == 1
    after_prefill = _published(snapshots)["num_used_tokens"]
    for _ in range(PUBLISH_INTERVAL - 1):
        step = engine.step(0.0)
        assert step is not None
        snapshots.after_step(step.kind)
    assert _published(snapshots)["num_used_tokens"] == after_prefill  # 14 decode steps: not yet
    step = engine.step(0.0)
    assert step is not None
    snapshots.after_step(step.kind)
    assert _published(snapshots)["num_used_tokens"] == engine.used_kv_tokens > after_prefill


def test_the_gate_reads_the_simulators_loads():
    engine = Engine(EngineConfig(kv_tokens=2048, max_running_requests=8, context_length=1000))
    snapshots = LoadSnapshots(engine, "test")
    load = parse_loads({"loads": [snapshots.current]}, read_at=1.0)
    assert (load.running, load.waiting, load.capacity) == (0, 0, 2048)
