"""The simulator's metrics have the names, types and labels SGLang's collector source defines.

The source of the installed SGLang is parsed, not imported, so a rename or a
relabel upstream fails here before it silently breaks the gate or a dashboard.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_metrics import EngineMetrics

COLLECTOR = "srt/observability/metrics_collector.py"
REQUIRED = {
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:kv_used_tokens",
    "sglang:kv_available_tokens",
    "sglang:max_total_num_tokens",
    "sglang:num_retracted_reqs",
    "sglang:num_retracted_requests",
    "sglang:gen_throughput",
    "sglang:prompt_tokens",
    "sglang:generation_tokens",
    "sglang:e2e_request_latency_seconds",
    "sglang:time_to_first_token_seconds",
}


def collector_source() -> ast.Module:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "SGLang must be installed (see the README)"
    path = Path(next(iter(spec.submodule_search_locations))) / COLLECTOR
    assert path.is_file(), f"{path} is gone: SGLang moved its metrics collector"
    return ast.parse(path.read_text())


def strings(node: ast.AST) -> list[str]:
    """Every string literal under `node`, in source order."""
    return [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def base_labels(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """The label dicts SGLang builds: the scheduler's (has tp_rank) and the tokenizer's."""
    found: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            keys = tuple(k for key in node.keys if key is not None for k in strings(key))
            if keys[:2] == ("model_name", "engine_type"):
                found["SchedulerMetricsCollector" if "tp_rank" in keys else "TokenizerMetricsCollector"] = (
                    keys
                )
    return found


def sglang_metrics(tree: ast.Module) -> dict[str, tuple[str, frozenset[str]]]:
    """Exposed name (no _total) -> (type, label names), for the scheduler and tokenizer collectors."""
    labels = base_labels(tree)
    metrics: dict[str, tuple[str, frozenset[str]]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in labels):
        for call in ast.walk(cls):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
                continue
            kind = call.func.id
            kwargs = {k.arg: k.value for k in call.keywords}
            name = strings(kwargs["name"]) if "name" in kwargs else []
            if kind not in ("Gauge", "Counter", "Histogram") or not name:
                continue
            exposed = name[0].removesuffix("_total") if kind == "Counter" else name[0]
            metrics[exposed] = (
                kind.lower(),
                frozenset(labels[cls.name]) | set(strings(kwargs["labelnames"])),
            )
    return metrics


def simulator_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """What the simulator exposes after a little traffic (so that every labelled series exists)."""
    registry = CollectorRegistry()
    metrics = EngineMetrics("tiny", registry)
    engine = Engine(EngineConfig(kv_tokens=300, max_running_requests=8, context_length=1000))
    metrics.start(engine, 0.0)
    for key in "ab":
        engine.submit(key, 100, 80, 0.0, prompt_key=key)
    now = 0.0
    while (step := engine.step(now)) is not None:
        now = step.end
        metrics.observe_step(engine, step)
        for request in step.finished:
            metrics.observe_finished(request, is_streaming=request.rid == "a")
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {
        f.name: (f.type, frozenset(k for s in f.samples for k in s.labels if k != "le"))
        for f in families
        # prometheus-client adds *_created series to counters and histograms, in SGLang too.
        if f.name.startswith("sglang:") and not f.name.endswith("_created")
    }


def test_every_simulator_metric_exists_in_sglang_with_the_same_type_and_labels():
    upstream = sglang_metrics(collector_source())
    assert len(upstream) > 30, "the parser found too few metrics: the collector's layout changed"
    ours = simulator_metrics()
    assert set(ours) >= REQUIRED
    for name, (kind, labels) in sorted(ours.items()):
        assert name in upstream, f"{name} is not defined in SGLang's {COLLECTOR}"
        assert upstream[name] == (kind, labels), (
            f"{name}: simulator {kind} {sorted(labels)}, SGLang {upstream[name]}"
        )


def test_scheduler_labels_are_the_ones_the_gate_and_dashboards_select_on():
    labels = base_labels(collector_source())
    assert labels["SchedulerMetricsCollector"][:3] == ("model_name", "engine_type", "tp_rank")
