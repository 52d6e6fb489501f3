"""The real SGLang engine (0.5.23, CPU backend) serves a tiny trained chat model in the local cluster,
behind the gate and the router, and the gate's protection holds against the engine itself: its
tokenizer, its scheduler, its retractions and its metrics (no simulator anywhere in this module).

Stand-ins here, as everywhere in the local cluster: the two sgl-kernel CPU bookkeeping ops
(`kvant_dev/engine_image/sgl_kernel_standin`), since no CPU build of sgl-kernel is on PyPI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from openai import APIStatusError, OpenAI
from tests.kube_wait import wait_for
from tests.unit.test_status_read_by_kstatus_and_argocd import kstatus

from e2e.qm import apply, get_qm, metrics_url, patch_spec, service_url, serving_pods, wait_ready
from e2e.test_dashboard_and_alert_queries_return_series import alert_queries, dashboard_queries
from e2e.test_router_discovers_engines_and_serves import workers
from kvant_contracts import prometheus_text
from kvant_contracts.serving_pod import GATE_PORT
from kvant_contracts.sglang_metrics import NUM_RUNNING_REQS
from kvant_contracts.tenancy import OVERRIDE_PRIORITY_HEADER
from kvant_dev.loadgen import LoadShape, engine_retractions, generate_load
from kvant_dev.open_loop import OpenLoopResult, OpenLoopShape, Slo, run_open_loop
from kvant_dev.prometheus import Prometheus, pod_discovery_job, static_job
from kvant_runtime.prompt_counter import ModelTokenizer

# Each test starts real engines (each about 1-3 min on a loaded 2-core machine) and loads them.
pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tinychat-cpu.yaml"
READY_SECONDS = 600  # two engine starts on a loaded 2-core machine
# One router where the mesh is not under test: two meshed smg 1.13 routers use ~0.45 of a core each
# even when idle (docs/concepts/router.md), which on a 2-core CI machine held real engines' starts to
# 5-6 minutes. The mesh is proven on the simulator (test_router_discovers_engines_and_serves).
ONE_ROUTER = {"router": {"replicas": 1}}
PROSE = [
    "The harbour wakes before the town does, and the fishing boats round the breakwater.",
    "To build a simple bookshelf you need four boards of the same length and a great deal of patience.",
    "Meeting notes, Thursday: the release, the on-call rota and the office move were discussed.",
    "Measure twice and cut once is the oldest advice in the workshop, and it is still the best.",
]


def chat_model(name: str, **spec: Any) -> dict[str, Any]:
    """The example as written, with spec sections merged in."""
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"] = {"name": name}
    for section, values in spec.items():
        manifest["spec"][section] = {**manifest["spec"].get(section, {}), **values}
    return manifest


def pod_metrics(pod: client.V1Pod) -> str:
    """A serving pod's merged gate + engine metrics page."""
    with urllib.request.urlopen(f"{metrics_url(pod)}/metrics", timeout=10) as response:
        return response.read().decode()


def by_pod(pods: list[client.V1Pod], name: str) -> dict[str, float]:
    return {pod.metadata.name: prometheus_text.total(pod_metrics(pod), name) for pod in pods}


def _refusals_by_class(pods: list[client.V1Pod]) -> dict[str, float]:
    """The gates' own refusals, summed over the pods, by `class/reason`."""
    found: dict[str, float] = {}
    for pod in pods:
        for sample in prometheus_text.samples(pod_metrics(pod), "kvant_gate_tenant_rejected_total"):
            if sample.value != 0:
                key = f"{sample.labels.get('priority')}/{sample.labels.get('reason')}"
                found[key] = found.get(key, 0.0) + sample.value
    return found


# SGLang's own priority scheduling, so the engine reports each running request's priority. Its
# default for requests without one is 0 here, not the documented 1 (docs/concepts/tenants.md), so that
# a class the gate wrote (standard: 1) shows apart from a priority it merely dropped.
PRIORITY_SCHEDULING = ["--enable-priority-scheduling", "--default-priority-value=0"]


# Three API keys (docs/concepts/tenants.md): one without a class (standard, the default), and the two
# tenants of the overload phase, whose keys give their classes.
KEYS_SECRET = "chat-keys"
STANDARD_KEY, INTERACTIVE_KEY, BATCH_KEY = "sk-e2e-standard", "sk-e2e-interactive", "sk-e2e-batch"
KEYS = (
    f"{STANDARD_KEY} tenant=e2e\n"
    f"{INTERACTIVE_KEY} tenant=interactive priority=critical\n"
    f"{BATCH_KEY} tenant=batch priority=sheddable\n"
)
# The overload phase, through the model's Service (the router): a sheddable flood of several times
# what two CPU engines serve, and a few critical requests beside it. No deadline header: the
# outcomes come from the classes alone.
FLOOD = OpenLoopShape(16.0, 20.0, 128, tuple(PROSE), Slo(60.0, 5.0), 1, 90.0, False, BATCH_KEY, "chat")
INTERACTIVE = OpenLoopShape(
    1.0, 20.0, 32, tuple(PROSE), Slo(60.0, 5.0), 2, 90.0, False, INTERACTIVE_KEY, "chat"
)
# What "different outcomes" must mean, with room for a CPU's timing: most critical requests served,
# most of the flood refused, and the critical share served several times the sheddable one. Not the
# issue's goal (critical keeps >= 0.9 of its goodput alone): one run had critical TTFT p50 18 s and
# 1 of 6 refused, because in the gate a critical request still waits for running sheddable work to
# end (docs/concepts/tenants.md, "What is not built").
CRITICAL_SERVED = 0.6
FLOOD_REFUSED = 0.5
SERVED_RATIO = 3.0


def test_real_engine_serves_openai_clients_through_the_router(cluster, operator, namespace, chat_model_uri):
    name = "chat"
    client.CoreV1Api(cluster.api_client()).create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name=KEYS_SECRET), string_data={"keys": KEYS}),
    )
    apply(
        cluster,
        namespace,
        chat_model(
            name,
            serving={"replicas": 2, "engineArgs": PRIORITY_SCHEDULING, **ONE_ROUTER},
            access={"apiKeysSecret": KEYS_SECRET},
        ),
    )
    qm = wait_ready(cluster, namespace, name, timeout=READY_SECONDS)

    engine = qm["status"]["engine"]
    assert (engine["sglangVersion"], engine["device"]) == ("0.5.23", "cpu"), engine
    assert engine["attentionBackend"] in ("torch_native", "intel_amx"), engine
    assert kstatus([get_qm(cluster, namespace, name)]) == ["Current"]  # as Flux reads it

    url = service_url(cluster, namespace, name)  # the router: smg in front of both gates
    # Ready counts engine pods; the router finds them through its own discovery a moment later.
    wait_for(lambda: _router_workers(url) >= 2 or None, 180, "the router to register both engines")
    openai = OpenAI(base_url=f"{url}/v1", api_key=STANDARD_KEY, timeout=120, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": PROSE[0]}]
    chat = openai.chat.completions.create(model=name, messages=messages, max_tokens=64)
    assert chat.choices[0].message.content and chat.usage is not None
    # The gate counts this prompt with the model's tokenizer and chat template, as the engine does.
    counter = ModelTokenizer(cluster.node_path(chat_model_uri.removeprefix("file://")))
    assert chat.usage.prompt_tokens == counter.chat({"messages": messages}), chat.usage

    completion = openai.completions.create(model=name, prompt=PROSE[1], max_tokens=16)
    assert completion.choices[0].text is not None and completion.usage is not None
    assert completion.usage.prompt_tokens == counter.text(PROSE[1]), completion.usage

    stream = openai.chat.completions.create(
        model=name,
        messages=messages,
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and 0 < usage.completion_tokens <= 32, chunks[-1]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    # A shared prefix lands on one replica (smg's cache_aware policy), whose radix cache then hits.
    pods = serving_pods(cluster, namespace, name)
    assert len(pods) == 2
    before = by_pod(pods, "kvant_gate_admitted_total")
    cached_before = by_pod(pods, "sglang:cached_tokens_total")
    prefix = " ".join(PROSE) * 3
    for i in range(12):
        openai.completions.create(model=name, prompt=f"{prefix} Question {i}:", max_tokens=4)
    after = by_pod(pods, "kvant_gate_admitted_total")
    admitted = {pod: count - before[pod] for pod, count in after.items()}
    assert max(admitted.values()) >= 10, admitted
    hot = max(admitted, key=lambda pod: admitted[pod])
    # The prompt tokens the hot replica's radix cache served, a counter SGLang's tokenizer adds to as
    # each request finishes. Not its cache_hit_rate gauge: that holds the last prefill batch's rate,
    # and the one-token generation SGLang runs for every /health (smg's and the kubelet's probes)
    # resets it to 0 within seconds (a CI run read 0 for 30 s after 12 of 12 went to one replica).
    hot_pod = next(p for p in pods if p.metadata.name == hot)

    def cached_tokens() -> float | None:
        served = (
            prometheus_text.total(pod_metrics(hot_pod), "sglang:cached_tokens_total") - cached_before[hot]
        )
        return served or None

    wait_for(cached_tokens, 30, f"the hot replica's radix cache to serve prompt tokens ({admitted})")

    # A client's own priority, in the body and in SGLang's override header, does not reach the engine:
    # the request runs at its class's (standard, 1). Sent to one gate, not through the router, which
    # could drop either on its own; long enough to be seen running in the engine's per-priority gauge.
    cold_pod = next(p for p in pods if p.metadata.name != hot)
    gate = OpenAI(
        base_url=f"http://{cold_pod.status.pod_ip}:{GATE_PORT}/v1",
        api_key=STANDARD_KEY,
        timeout=120,
        max_retries=0,
    )
    jumping = threading.Thread(
        target=lambda: gate.chat.completions.create(
            model=name,
            messages=messages,
            max_tokens=400,
            extra_body={"priority": 999, "min_tokens": 400},
            extra_headers={OVERRIDE_PRIORITY_HEADER: "998"},
        )
    )
    jumping.start()
    try:
        # Not 0: SGLang's own /health generations carry the default and may be caught running too.
        running = lambda: _running_priorities(pod_metrics(cold_pod)) - {"0"} or None  # noqa: E731
        seen = wait_for(running, 60, "the request to run in the engine")
        assert seen == {"1"}, seen
    finally:
        jumping.join(timeout=180)

    # Two keys of different classes through the Service, under overload: the sheddable flood is shed
    # (429), the critical tenant's requests are all served. A key the Secret does not hold is refused.
    stranger = OpenAI(base_url=f"{url}/v1", api_key="sk-unknown", timeout=60, max_retries=0)
    with pytest.raises(APIStatusError) as refused:
        stranger.chat.completions.create(model=name, messages=messages, max_tokens=4)
    assert refused.value.status_code == 401, refused.value

    async def both() -> tuple[OpenLoopResult, OpenLoopResult]:
        flood, interactive = await asyncio.gather(run_open_loop(url, FLOOD), run_open_loop(url, INTERACTIVE))
        return flood, interactive

    flood, interactive = asyncio.run(both())
    outcomes = {
        "batch": flood.summary(),
        "interactive": interactive.summary(),
        # Where a refusal came from: the gates count theirs by class and reason; a 429 they did not
        # count came from the router (smg), which knows no classes.
        "gate refusals": _refusals_by_class(pods),
    }
    print(f"two keys under overload: {outcomes}", flush=True)
    assert set(flood.statuses) | set(interactive.statuses) <= {200, 429}, outcomes
    critical_served = interactive.statuses[200] / len(interactive.outcomes)
    flood_served = flood.statuses[200] / len(flood.outcomes)
    assert critical_served >= CRITICAL_SERVED, outcomes
    assert flood.statuses[429] >= FLOOD_REFUSED * len(flood.outcomes), outcomes
    assert critical_served >= SERVED_RATIO * flood_served, outcomes


def _running_priorities(text: str) -> set[str]:
    """The priorities of the engine's running requests, from its per-priority running-requests gauge."""
    return {
        sample.labels["priority"]
        for sample in prometheus_text.samples(text, NUM_RUNNING_REQS)
        if sample.value > 0 and sample.labels.get("priority")
    }


# A 2,048-token cache (kvCacheMiB 1: the tiny model's KV takes 512 bytes a token). The engine runs at
# most 8 requests at once (--max-running-requests: the plan's KV tokens / 256), and every answer runs to
# its limit of 400 tokens (min_new_tokens), so 8 answers at their ends need 8 x 440 tokens.
#
# Unprotected, whether SGLang overflows its cache depends on its own admission: a new request must fit
# its prompt plus its whole limit, while running ones reserve new_token_ratio x what they may still
# write (0.7 at first, decaying to 0.1 over 600 decode steps), so whether the first bursts overflow
# depends on how the engine's speed compares with the spread of arrivals (two quiet CI runs once saw
# no retraction in 58-65 answers at the default). So the engine here is configured as a deployment
# that wants concurrency from it would be (spec.serving.scheduler, which the launcher turns into SGLang's
# flag): --schedule-conservativeness 0.3 starts the ratio at 0.21,
# and its own admission over-commits whatever the timing. That is the harder case for the gate: with
# `engine` admission (the default) it reserves nothing itself and leaves admission to this optimistic
# engine, so what keeps the cache from overflowing is its own check of the running batch's growth
# (kvant_runtime.gate.admit.kv_peak), not the engine's.
AGGRESSIVE_ENGINE = {"conservativeness": 0.3}
NEW_TOKENS = 400
SMALL_CACHE = {"memoryGiB": 4, "cores": 1, "kvCacheMiB": 1}
WINDOW_SECONDS = 40.0
# Overload: 16 closed-loop clients that start together, twice the engine's 8 running requests, so the
# unprotected engine's first rounds admit all it may and they outgrow the cache whatever the timing
# (open-loop arrivals at a few times its capacity spread the starts, and this small cache held).
OVERLOAD = LoadShape(
    clients=16,
    seconds=WINDOW_SECONDS,
    prompt_tokens=40,
    new_tokens=NEW_TOKENS,
    slo_seconds=120,
    texts=tuple(PROSE),
    run_to_limit=True,
    drain_seconds=60,
)
# Generous for a CPU core: the comparison at 1x is of completed tokens, the SLO only sorts.
SLO = Slo(ttft_seconds=60.0, tpot_seconds=1.0)
# With enforce the gate lets through nothing whose growth could overflow the cache, keeping 5% of it
# free; a retraction can still come from what that model of the engine leaves out (a request starting
# later than assumed, page rounding, the decode step's extra token).
ENFORCE_RETRACTIONS_BOUND = 1
ONE_X_SHARE = 0.9  # protected at 1x completes at least this share of the unprotected output tokens


def _open_loop(url: str, rate: float, seed: int, drain: float) -> OpenLoopResult:
    # No deadline header: at 1x the comparison is of what completes, whatever the wait.
    shape = OpenLoopShape(
        rate, WINDOW_SECONDS, NEW_TOKENS, tuple(PROSE), SLO, seed, drain, send_deadline=False
    )
    return asyncio.run(run_open_loop(url, shape))


def test_protection_pays_on_the_real_engine(cluster, operator, namespace, chat_model_uri, tmp_path):
    """The default admission (`engine`) against the real engine: under overload the engine retracts
    unprotected and not protected, and at 1x (its measured capacity) protection completes at least
    0.9 of the tokens the unprotected engine does: a test that fails when protection costs goodput."""
    name = "chat-load"
    apply(
        cluster,
        namespace,
        chat_model(
            name,
            serving={"cpu": SMALL_CACHE, "scheduler": AGGRESSIVE_ENGINE},
            limits={"maxConcurrency": 24, "maxQueued": 64, "queueTimeoutSeconds": 30},
            protection={"mode": "off", "metrics": {"intervalSeconds": 2}},
            # Bounds of one, as in the dashboard test: the replicas panel and the at-max alert have
            # series, with no second replica.
            autoscaling={"minReplicas": 1, "maxReplicas": 1},
        ),
    )
    wait_ready(cluster, namespace, name, timeout=READY_SECONDS)
    pod = serving_pods(cluster, namespace, name)[0]
    url = service_url(cluster, namespace, name)
    # The CR's knob reached SGLang itself: its own server info says so.
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{GATE_PORT}/server_info", timeout=30) as got:
        assert json.load(got)["schedule_conservativeness"] == AGGRESSIVE_ENGINE["conservativeness"]
    jobs = [
        pod_discovery_job(cluster.prometheus_targets),
        static_job("kvant-operator", [f"127.0.0.1:{operator.metrics_port}"]),
    ]
    prometheus = Prometheus(cluster.toolchain.prometheus, tmp_path / "prometheus", jobs)
    prometheus.start()
    try:
        report: dict[str, Any] = {}

        def retractions_during(what: str, run: Callable[[], Any]) -> Any:
            # A request the load generator gave up on still runs in the engine and can be retracted:
            # the previous phase's work is done before this phase's retractions are counted.
            wait_for(_engine_idle(pod), 300, f"the engine to be idle before {what}")
            before = engine_retractions(metrics_url(pod))
            result = run()
            report[what] = {"retractions": engine_retractions(metrics_url(pod)) - before}
            return result

        def overload(what: str, shape: LoadShape = OVERLOAD) -> None:
            result = retractions_during(what, lambda: generate_load(url, shape))
            report[what].update(
                statuses=dict(result.statuses), errors=result.errors, tokens=result.completed_tokens
            )
            print(f"{what}: {report[what]}", flush=True)

        def one_x(what: str, rate: float) -> OpenLoopResult:
            result = retractions_during(what, lambda: _open_loop(url, rate, 2, drain=120.0))
            report[what].update(result.summary(), rate=round(rate, 3))
            print(f"{what}: {report[what]}", flush=True)
            return result

        # Cut at the window's end, so what completed is what the engine finished in it.
        overload("off, overload", dataclasses.replace(OVERLOAD, drain_seconds=0))
        if report["off, overload"]["retractions"] == 0:
            # A flaky precondition, seen once (2026-12-04: 105 answers, 0 retractions; the same
            # code passed on the rerun; its rate is not known): whether the unprotected engine's
            # batch outgrows the cache within one window depends on how the 16 starts spread over
            # its first prefill batches. A second window, not a weaker assertion: protection is
            # only tested against an engine seen to retract.
            overload("off, overload", dataclasses.replace(OVERLOAD, drain_seconds=0))
        assert report["off, overload"]["retractions"] > 0, report
        # 1x: what the unprotected engine completed a second, kept full.
        capacity = report["off, overload"]["tokens"] / NEW_TOKENS / WINDOW_SECONDS
        assert capacity > 0, report
        off = one_x("off, 1x", capacity)

        # The protection mode and limits are live: the gate follows the edit, no pod restarts.
        patch_spec(cluster, namespace, name, {"protection": {"mode": "enforce"}})

        def in_enforce() -> bool | None:
            return prometheus_text.value(pod_metrics(pod), "kvant_gate_mode", mode="enforce") == 1 or None

        wait_for(in_enforce, 60, "the gate to follow the edit to enforce")
        protected = one_x("enforce, 1x", capacity)
        assert protected.completed_tokens >= ONE_X_SHARE * off.completed_tokens, report
        assert report["enforce, 1x"]["retractions"] <= ENFORCE_RETRACTIONS_BOUND, report

        overload("enforce, overload")
        enforced = report["enforce, overload"]
        assert enforced["retractions"] <= ENFORCE_RETRACTIONS_BOUND, report
        assert set(enforced["statuses"]) <= {200, 429, 503} and enforced["errors"] == 0, report
        assert enforced["statuses"].get(200, 0) > 0, report
        same = serving_pods(cluster, namespace, name)[0]
        assert same.metadata.uid == pod.metadata.uid
        assert all(s.restart_count == 0 for s in same.status.container_statuses), (
            same.status.container_statuses
        )

        # Prometheus scrapes the real engine's series through the gate's metrics port, and every
        # dashboard query and alert expression finds what it names (retractions exist by now).
        running = f'sglang:num_running_reqs{{namespace="{namespace}"}}'
        wait_for(_answers(prometheus, running), 120, "the engine's own series in Prometheus")
        queries = [(f"dashboard: {q}", q) for q in dashboard_queries(namespace, name)]
        queries += [(f"alert {alert}: {q}", q) for alert, q in alert_queries()]
        for what, expr in queries:
            wait_for(_answers(prometheus, expr), 120, what)
    finally:
        prometheus.stop()


def _engine_idle(pod: client.V1Pod) -> Callable[[], bool | None]:
    def idle() -> bool | None:
        text = pod_metrics(pod)
        running = prometheus_text.total(text, "sglang:num_running_reqs")
        busy = running + prometheus_text.total(text, "sglang:num_queue_reqs")
        return busy == 0 or None

    return idle


def _answers(prometheus: Prometheus, expr: str) -> Callable[[], list[dict[str, Any]] | None]:
    return lambda: prometheus.query(expr) or None


def _router_workers(url: str) -> int:
    """The router's registered engines (test_router's `workers`), 0 while it does not answer yet."""
    try:
        return workers(url)
    except (OSError, ValueError):
        return 0
