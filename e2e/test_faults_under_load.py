"""Faults under load, the short version: a model keeps serving while its parts fail one at a time.

One simulator model with two replicas (so two smg routers front it) serves a bounded closed-loop load
(kvant_dev.loadgen) in a background thread. A schedule drawn from a fixed seed (KVANT_FAULT_SEED, by
default 32: the order, each fault's target pod and its moment in the load) injects one fault per load
window (kvant_dev.faults):

- operator: SIGKILL the operator, start it again;
- gate / engine: SIGKILL one serving pod's gate / engine container (the node agent restarts it);
- router: delete one router pod (its Deployment replaces it);
- kube-apiserver / etcd: SIGKILL it and start it again with the same flags and data.

After each fault, the invariants:
- every request ended with 200 or a documented refusal (429, 503, 408: docs/concepts/admission.md);
  any other answer, a dropped connection or a request past the load's bound (loadgen's `errors`) is
  "lost". Zero may be lost to operator, apiserver and etcd faults, which are off the data path. A
  fault that kills a process carrying requests (gate, engine, router) may lose the requests in flight
  on it, at most one per client (closed loop: each client has one request out);
- the model is back within READY_SECONDS: the QuantizedModel Ready for its generation, both engine
  pods and both routers Ready, each router listing both engines (the time is measured and printed);
- no Job was created (nothing converts again);
- the serving pods are the same pods, and their containers restarted exactly as often as the fault
  itself caused (one for a gate or engine kill, none otherwise).

It prints one table (fault x requests, non-200, lost, time to Ready, violations) and fails on any
violation. bench/README.md ("Faults under load (short e2e)") has a measured table. Not here: faults
overlapping in time, the model store failing mid-fetch, a full artifacts volume, Prometheus stopped,
the node agent restarted, the operator's memory: that is the long soak (bench/soak/run.py).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from kubernetes import client

from e2e.capacity import TINY_BYTES_PER_TOKEN
from e2e.qm import (
    API_DOWN,
    apply,
    get_qm,
    pod_ready,
    ready_for_generation,
    router_pods,
    router_workers,
    service_url,
    serving_pods,
    wait_ready,
)
from kvant_dev.cluster import LocalCluster
from kvant_dev.faults import crash_control_plane, delete_pod, kill_container
from kvant_dev.loadgen import LoadResult, LoadShape, generate_load
from kvant_dev.operator_process import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(600)]

MODEL = "faulted"
SEED = int(os.environ.get("KVANT_FAULT_SEED", "32"))
REPLICAS = ROUTERS = 2
# Well within two simulated replicas: in steady state every request is answered with 200.
LOAD = LoadShape(
    clients=4,
    seconds=25,  # one fault's window: the fault lands 2-5 s in
    prompt_tokens=32,
    new_tokens=16,
    slo_seconds=30,
    bytes_per_token=TINY_BYTES_PER_TOKEN,
    drain_seconds=20,  # a request sent before the window's end may take this long; later, it is lost
    model=MODEL,  # smg routes /generate by model name
)
READY_SECONDS = 90  # the bound on each fault's recovery
DOCUMENTED = {200, 429, 503, 408}


@dataclass
class Scene:
    cluster: LocalCluster
    operator: OperatorProcess
    namespace: str
    gone: set[str] = field(default_factory=set)  # uids of pods a fault deleted


@dataclass(frozen=True)
class Fault:
    name: str
    restarts: int  # serving-container restarts the fault itself causes
    kills_requests: bool  # kills a process that carries requests: those in flight on it may be lost
    inject: Callable[[Scene, random.Random], str]  # returns what it hit, for the table


@dataclass
class Row:
    fault: str
    target: str
    at: float
    load: LoadResult | None = None
    ready_seconds: float | None = None
    violations: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(self.load.statuses.values()) + self.load.errors if self.load else 0

    @property
    def non_200(self) -> int:
        return self.requests - self.load.completed if self.load else 0

    @property
    def lost(self) -> int:
        if self.load is None:
            return 0
        return self.load.errors + sum(n for code, n in self.load.statuses.items() if code not in DOCUMENTED)


def _kill_operator(scene: Scene, rng: random.Random) -> str:
    scene.operator.kill()
    scene.operator.start()
    return "operator"


def _kill_serving_container(container: str) -> Callable[[Scene, random.Random], str]:
    def inject(scene: Scene, rng: random.Random) -> str:
        pod = rng.choice(sorted(p.metadata.name for p in serving_pods(scene.cluster, scene.namespace, MODEL)))
        kill_container(scene.cluster, scene.namespace, pod, container)
        return f"{pod}/{container}"

    return inject


def _delete_router(scene: Scene, rng: random.Random) -> str:
    pod = rng.choice(
        sorted(router_pods(scene.cluster, scene.namespace, MODEL), key=lambda p: p.metadata.name)
    )
    scene.gone.add(pod.metadata.uid)
    delete_pod(scene.cluster, scene.namespace, pod.metadata.name)
    return str(pod.metadata.name)


def _crash(name: str) -> Callable[[Scene, random.Random], str]:
    def inject(scene: Scene, rng: random.Random) -> str:
        crash_control_plane(scene.cluster, name)
        return name

    return inject


FAULTS = [
    Fault("operator", restarts=0, kills_requests=False, inject=_kill_operator),
    Fault("gate", restarts=1, kills_requests=True, inject=_kill_serving_container("gate")),
    Fault("engine", restarts=1, kills_requests=True, inject=_kill_serving_container("engine")),
    Fault("router", restarts=0, kills_requests=True, inject=_delete_router),
    Fault("kube-apiserver", restarts=0, kills_requests=False, inject=_crash("kube-apiserver")),
    Fault("etcd", restarts=0, kills_requests=False, inject=_crash("etcd")),
]


def test_model_serves_through_faults_one_at_a_time(cluster, operator, namespace, tiny_model):
    manifest = tiny_model(
        MODEL,
        kvCache={"dtype": "fp8_e4m3", "scales": "unit"},  # no calibration Job: the scales are 1.0
        serving={
            "engine": "simulator",
            "replicas": REPLICAS,
            "gpu": {"memoryGiB": 2},
            "memFractionStatic": 0.9,
        },
    )
    apply(cluster, namespace, manifest)
    wait_ready(cluster, namespace, MODEL, timeout=300)
    scene = Scene(cluster, operator, namespace)
    assert _wait_recovered(scene, 0), "both routers Ready, each listing both engines"
    url = service_url(cluster, namespace, MODEL)
    warm = generate_load(url, replace(LOAD, seconds=3))
    assert warm.completed > 0 and set(warm.statuses) == {200} and warm.errors == 0, (
        warm.statuses,
        warm.errors,
    )

    rng = random.Random(SEED)
    rows: list[Row] = []
    for fault in rng.sample(FAULTS, len(FAULTS)):
        row = _inject_under_load(scene, fault, rng, url)
        rows.append(row)
        if row.ready_seconds is None:
            break  # not back: later faults would measure this one
    print(_table(rows))
    failed = {f"{r.fault} ({r.target})": r.violations for r in rows if r.violations}
    assert not failed, f"invariants broken under faults (seed {SEED}): {failed}"
    assert len(rows) == len(FAULTS)


def _inject_under_load(scene: Scene, fault: Fault, rng: random.Random, url: str) -> Row:
    """One fault at a drawn moment of one load window; returns its row, with what it broke."""
    at = round(rng.uniform(2.0, 5.0), 1)
    restarts_before = _restarts(serving_pods(scene.cluster, scene.namespace, MODEL))
    jobs, pods = _jobs(scene), _serving_pod_uids(scene)
    outcome: dict[str, LoadResult] = {}
    load = threading.Thread(target=lambda: outcome.update(load=generate_load(url, LOAD)), daemon=True)
    load.start()
    time.sleep(at)
    injected = time.monotonic()
    row = Row(fault.name, "?", at)
    try:
        row.target = fault.inject(scene, rng)
    except Exception as err:  # a fault that cannot be injected is a failure of this test, in the table
        row.violations.append(f"not injected: {err!r}")
    expected = restarts_before + fault.restarts
    if _wait_recovered(scene, expected):
        row.ready_seconds = time.monotonic() - injected
    else:
        row.violations.append(f"not back within {READY_SECONDS} s")
    load.join(timeout=LOAD.seconds + LOAD.drain_seconds + 30)
    row.load = outcome.get("load")
    if load.is_alive() or row.load is None:
        row.violations.append("the load did not end within its bound")
        return row
    allowed = LOAD.clients if fault.kills_requests else 0
    if row.lost > allowed:
        row.violations.append(f"{row.lost} requests lost (allowed {allowed}): {_outcome(row.load)}")
    if row.load.completed == 0:
        row.violations.append("no request was served")
    restarts = _restarts(serving_pods(scene.cluster, scene.namespace, MODEL))
    if restarts != expected:
        row.violations.append(f"serving containers restarted {restarts} times in all, expected {expected}")
    if (now := _serving_pod_uids(scene)) != pods:
        row.violations.append(f"serving pods replaced: {sorted(pods ^ now)}")
    if new_jobs := _jobs(scene) - jobs:
        row.violations.append(f"new Jobs: {sorted(new_jobs)}")
    return row


def _wait_recovered(scene: Scene, restarts: int) -> bool:
    """Until the whole model is back (see the module docstring), or READY_SECONDS."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if _recovered(scene, restarts):
            return True
        time.sleep(0.5)
    return False


def _recovered(scene: Scene, restarts: int) -> bool:
    try:
        if not ready_for_generation(get_qm(scene.cluster, scene.namespace, MODEL)):
            return False
        engines = serving_pods(scene.cluster, scene.namespace, MODEL)
        routers = router_pods(scene.cluster, scene.namespace, MODEL)
    except API_DOWN:
        return False
    # Restarts and readiness from the one listing: from two, a restart already reported could be
    # paired with readiness from before it, and the model would look back while its engine is down.
    return (
        _restarts(engines) >= restarts  # the fault's own restarts at least: the kill has been seen
        and len(engines) == REPLICAS
        and all(pod_ready(p) for p in engines)
        and len(routers) == ROUTERS
        and all(
            pod_ready(p) and p.metadata.uid not in scene.gone and router_workers(p) == REPLICAS
            for p in routers
        )
    )


def _restarts(pods: list[client.V1Pod]) -> int:
    """Restarts of every container of these pods."""
    return sum(s.restart_count for p in pods for s in p.status.container_statuses or [])


def _serving_pod_uids(scene: Scene) -> set[str]:
    return {p.metadata.uid for p in serving_pods(scene.cluster, scene.namespace, MODEL)}


def _jobs(scene: Scene) -> set[str]:
    jobs = client.BatchV1Api(scene.cluster.api_client()).list_namespaced_job(scene.namespace).items
    return {j.metadata.uid for j in jobs}


def _outcome(load: LoadResult) -> str:
    codes = " ".join(f"{code}:{n}" for code, n in sorted(load.statuses.items()))
    return f"{codes} errors:{load.errors}"


def _table(rows: list[Row]) -> str:
    columns = ("fault", "target", "at s", "requests", "non-200", "lost", "ready s", "outcome / violations")
    cells = [columns]
    for r in rows:
        ready = f"{r.ready_seconds:.1f}" if r.ready_seconds is not None else "-"
        notes = "; ".join(r.violations) or (_outcome(r.load) if r.load else "")
        cells.append(
            (r.fault, r.target, f"{r.at:.1f}", str(r.requests), str(r.non_200), str(r.lost), ready, notes)
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns) - 1)]
    title = f"faults under load, seed {SEED}: {LOAD.clients} clients x {LOAD.seconds:.0f} s per fault"
    lines = [" | ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]) for row in cells]
    return "\n".join([title, *lines])
