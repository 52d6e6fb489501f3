"""The soak's faults: each one armed against the scene (its target drawn from the seed), injected at
its moment in a load window, and lifted (the crashed process started again, the stopped server
started, the filled volume freed). The actions themselves are kvant_dev.faults'.

A fault's `path` says what it may cost the load:
- "control": off the data path (operator, control plane, Prometheus, S3, a full volume): nothing;
- "data": it kills a process of `alpha` that carries requests (gate, engine, router): the requests in
  flight on it, at most one per client;
- "outage": every replica at once (the node agent: see kvant_dev.faults.crash_node_agent), or all on
  one lost node (its router's address stays in the Service until the node is marked): any request
  sent before the models are whole again.
After the models are whole again, no fault may cost a request.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from bench.soak.checks import missing, of, pods, ready, started_since
from bench.soak.stage import (
    ALPHA,
    BETA,
    BUCKET,
    FILE_SOURCES,
    NS,
    SERVED,
    Scene,
    apply_model,
    node_checkpoint,
    transient_conversion,
    transient_fetch,
)
from e2e.qm import API_DOWN, condition, get_qm
from kubernetes import client

from kvant_dev import faults
from kvant_dev.cluster import KubectlError
from kvant_dev.faults import FaultError
from kvant_operator.object_keys import MODEL_LABEL
from kvant_operator.render.roles import RoleKind

Path_ = Literal["control", "data", "outage"]
Pods = list[client.V1Pod]
MIB = 1 << 20
PADDING_MIB = 16  # the fetched model's extra file: long enough at THROTTLE to be caught mid-file
THROTTLE = 1 * MIB  # bytes per second through the proxy until the store comes back
ARM_SECONDS = 120.0  # at most, to arm a fault (a fetch caught mid-file, a conversion Job created)
RETRY_SECONDS = 20.0  # an injection that meets the apiserver down (an overlapping fault) tries again


@dataclass
class Hit:
    """One armed fault: what it hits, how it is injected, and its own part of "recovered"."""

    target: str
    inject: Callable[[Hit], None]  # blocks until the fault is lifted; sets `lifted`
    back: Callable[[Pods, Hit], bool] = lambda listing, hit: True
    notes: list[str] = field(default_factory=list)  # evidence it hit, for the table
    wall: float = 0.0  # time.time() at the injection
    lifted: float | None = None  # time.monotonic() when the fault was lifted
    error: str | None = None

    def run(self) -> None:
        self.wall = time.time()
        try:
            self.inject(self)
        except Exception as err:  # a fault that cannot be injected is the soak's failure, in the table
            self.error = f"not injected: {err!r}"
        if self.lifted is None:
            self.lifted = time.monotonic()


@dataclass(frozen=True)
class Fault:
    name: str
    path: Path_
    bound: float  # seconds from the fault's lifting until every model is whole again
    arm: Callable[[Scene, random.Random], Hit]
    arm_last: bool = False  # in a pair, armed after the other (what it arms does not wait long)


def _retry(action: Callable[[], object]) -> None:
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            action()
            return
        except (FaultError, KubectlError, *API_DOWN):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _lift(hit: Hit) -> None:
    hit.lifted = time.monotonic()


def _operator(scene: Scene, rng: random.Random) -> Hit:
    def inject(hit: Hit) -> None:
        scene.operator.kill()
        _lift(hit)  # a supervisor starts it again at once: its start is part of the recovery
        scene.operator.start()

    return Hit("operator", inject)


def _container(container: str) -> Callable[[Scene, random.Random], Hit]:
    def arm(scene: Scene, rng: random.Random) -> Hit:
        pod = rng.choice(sorted(p.metadata.name for p in of(pods(scene), ALPHA.name, RoleKind.ENGINE)))

        def inject(hit: Hit) -> None:
            _retry(lambda: faults.kill_container(scene.cluster, NS, pod, container))
            _lift(hit)

        def back(listing: Pods, hit: Hit) -> bool:
            return any(p.metadata.name == pod and started_since(p, container, hit.wall) for p in listing)

        return Hit(f"{pod}/{container}", inject, back)

    return arm


def _router(scene: Scene, rng: random.Random) -> Hit:
    pod = rng.choice(sorted(of(pods(scene), ALPHA.name, RoleKind.ROUTER), key=lambda p: p.metadata.name))

    def inject(hit: Hit) -> None:
        scene.gone.add(pod.metadata.uid)
        _retry(lambda: faults.delete_pod(scene.cluster, NS, pod.metadata.name))
        _lift(hit)

    return Hit(str(pod.metadata.name), inject)


def _control_plane(name: str) -> Callable[[Scene, random.Random], Hit]:
    def arm(scene: Scene, rng: random.Random) -> Hit:
        def inject(hit: Hit) -> None:
            _lift(hit)  # the supervisor's restart, and the wait for /readyz, is the recovery
            faults.crash_control_plane(scene.cluster, name)

        return Hit(name, inject)

    return arm


def _prometheus(scene: Scene, rng: random.Random) -> Hit:
    hold = round(rng.uniform(8.0, 15.0), 1)

    def inject(hit: Hit) -> None:
        faults.stop_prometheus(scene.cluster)
        deadline, seen = time.monotonic() + hold, set()
        while time.monotonic() < deadline:
            for served in SERVED:
                try:
                    found = condition(get_qm(scene.cluster, NS, served.name), "CacheProtected")
                except API_DOWN:
                    continue
                if found is not None and found["status"] != "True":
                    seen.add(f"{served.name} {found['reason']}")
            time.sleep(1.0)
        hit.notes.append(f"down {hold:.0f} s; CacheProtected: {', '.join(sorted(seen)) or 'stayed True'}")
        _lift(hit)
        faults.start_prometheus(scene.cluster)

    def back(listing: Pods, hit: Hit) -> bool:
        return all(
            (found := condition(get_qm(scene.cluster, NS, s.name), "CacheProtected")) is not None
            and found["status"] == "True"
            for s in SERVED
        )

    return Hit(f"prometheus (down {hold:.0f} s)", inject, back)


def _s3(scene: Scene, rng: random.Random) -> Hit:
    """A fresh s3:// model whose fetch (through the throttled proxy) is caught mid-file, then the
    store crashes for a while."""
    hold = round(rng.uniform(5.0, 10.0), 1)
    serial = scene.next_serial()
    name, prefix = f"fetched-{serial}", f"{NS}/fetch-{serial}"
    for path in sorted(node_checkpoint(scene.cluster).iterdir()):
        scene.s3.upload_file(str(path), BUCKET, f"{prefix}/{path.name}")
    scene.s3.put_object(Bucket=BUCKET, Key=f"{prefix}/padding.safetensors", Body=b"\0" * (PADDING_MIB * MIB))
    scene.proxy.throttle(THROTTLE)
    apply_model(scene, transient_fetch(name, prefix, scene.proxy.url))
    scene.transient.append(name)
    sources = scene.artifacts / "sources"

    def partial() -> int:
        parts = sources.rglob("padding.safetensors.part") if sources.exists() else iter(())
        return max((p.stat().st_size for p in parts), default=0)

    _wait(lambda: partial() >= MIB, f"the fetch of {name} to be mid-file")

    def inject(hit: Hit) -> None:
        hit.notes.append(
            f"fetch at {partial() / MIB:.1f}/{PADDING_MIB} MiB of a file; store down {hold:.0f} s"
        )
        faults.crash_s3(scene.cluster)
        time.sleep(hold)
        _lift(hit)
        faults.start_s3(scene.cluster)
        scene.proxy.throttle(None)

    def back(listing: Pods, hit: Hit) -> bool:
        return ready(scene, name)

    return Hit(f"seaweedfs, mid-fetch of {name}", inject, back)


def _node_agent(scene: Scene, rng: random.Random) -> Hit:
    def inject(hit: Hit) -> None:
        _lift(hit)
        faults.crash_node_agent(scene.cluster)

    def back(listing: Pods, hit: Hit) -> bool:
        # The serving pods only: a model's finished Job pods (its plan) are not started again, by the
        # agent or by a kubelet (a soak run waited 150 s on alpha's completed plan pod, 2026-12-05).
        return all(started_since(p, c.name, hit.wall) for p in _serving(listing) for c in p.spec.containers)

    return Hit("node agent", inject, back)


def _alpha_only_node(scene: Scene) -> str | None:
    """A node that holds one of alpha's engines and none of beta's: draining or losing it takes one
    replica of the two-replica model and leaves the one-replica model alone (a one-replica model has
    nothing to fail over to; what it gives is a refused connection until it starts elsewhere)."""
    listing = pods(scene)
    alpha = {p.spec.node_name for p in of(listing, ALPHA.name, RoleKind.ENGINE)}
    beta = {p.spec.node_name for p in of(listing, BETA.name, RoleKind.ENGINE)}
    candidates = sorted(alpha - beta)
    return candidates[0] if candidates else None


def _spread_alpha(scene: Scene) -> tuple[str | None, str]:
    """A node holding one of alpha's engines and none of beta's, and how it came to be. When an earlier
    drain or loss left alpha all on beta's node (Kubernetes moves nothing back on its own; a
    descheduler would), one of alpha's engines and one of its routers there are deleted, gracefully,
    and their replacements start on the other node: the soak's arming, before the window's load."""
    node = _alpha_only_node(scene)
    if node is not None:
        return node, ""
    listing = pods(scene)
    crowded = {p.spec.node_name for p in of(listing, BETA.name, RoleKind.ENGINE)}
    moved = []
    for kind in RoleKind:
        there = [p for p in of(listing, ALPHA.name, kind) if p.spec.node_name in crowded]
        if len(there) == len(of(listing, ALPHA.name, kind)) and there:
            name = str(there[0].metadata.name)
            _retry(partial(faults.delete_pod, scene.cluster, NS, name))
            moved.append(name)

    def spread() -> bool:
        now = pods(scene)
        return _alpha_only_node(scene) is not None and not any(missing(scene, s, now) for s in SERVED)

    _wait(spread, "alpha to spread over both nodes again")
    return _alpha_only_node(scene), f"alpha spread again first ({', '.join(moved)} deleted)"


def _aimed(hit: Hit, node: str | None, spread: str) -> bool:
    """Whether a node fault has its node; notes how it got one, or lifts the fault as not hit."""
    hit.notes += [spread] if spread else []
    if node is None:
        hit.notes.append("no node holds alpha without beta: not hit")
        _lift(hit)
    return node is not None


def _node_drain(scene: Scene, rng: random.Random) -> Hit:
    """`kubectl drain` of a node holding one of alpha's replicas (cordon, evictions through the PDBs),
    uncordoned once every pod there is evicted (its replacements are placed by then)."""
    node, spread = _spread_alpha(scene)

    def inject(hit: Hit) -> None:
        if not _aimed(hit, node, spread) or node is None:  # (the second for the type checker)
            return
        evicted, refused = faults.drain_node(scene.cluster, node, NS)
        hit.notes.append(f"{evicted} pods evicted from {node}, {refused} PDB refusals")
        _lift(hit)  # the evictions are the fault; the replacements' starts are the recovery
        _wait(lambda: not _on(scene, node), f"the drained pods to leave {node}")
        _retry(lambda: scene.cluster.kubectl("uncordon", node))

    return Hit(f"drain of {node or 'no node'}", inject)


def _node_loss(scene: Scene, rng: random.Random) -> Hit:
    """A node holding one of alpha's replicas goes silent (kvant_dev.nodeagent.node_faults): Kubernetes
    marks it, evicts its pods after lostNodeSeconds, and starts them elsewhere. Once they are evicted
    the node comes back, as a repaired node would, and confirms their deletion."""
    node, spread = _spread_alpha(scene)
    lost: set[str] = set()  # the serving pods the node held when it went

    def inject(hit: Hit) -> None:
        if not _aimed(hit, node, spread) or node is None:  # (the second for the type checker)
            return
        lost.update(str(p.metadata.uid) for p in _serving_on(scene, node))
        scene.cluster.lose_node(node)
        _lift(hit)  # the loss is the fault, as a crash is; the move elsewhere is the recovery
        lost_at = time.monotonic()
        try:
            # The served models' pods: a finished Job pod keeps Kubernetes' default 300 s toleration.
            _wait(lambda: not _serving_on(scene, node), f"the serving pods of {node} to be evicted")
            evicted = time.monotonic() - lost_at
            hit.notes.append(f"{node} lost; its serving pods evicted {evicted:.0f} s later")
        finally:
            scene.cluster.restore_node(node)

    def back(listing: Pods, hit: Hit) -> bool:
        # Gone, not merely away from the node: back, the node may rightly take their replacements.
        return not [p for p in listing if p.metadata.uid in lost]

    return Hit(f"loss of {node or 'no node'}", inject, back)


def _on(scene: Scene, node: str) -> Pods:
    """The namespace's pods on `node` that are not being deleted."""
    return [p for p in pods(scene) if p.spec.node_name == node]


def _serving_on(scene: Scene, node: str) -> Pods:
    """The served models' engine and router pods on `node` that are not being deleted."""
    return _serving(_on(scene, node))


def _serving(listing: Pods) -> Pods:
    """The served models' engine and router pods in `listing` (not their Job pods)."""
    return [p for s in SERVED for kind in RoleKind for p in of(listing, s.name, kind)]


def _volume(scene: Scene, rng: random.Random) -> Hit:
    """At its moment, a new model that converts is applied; the artifacts volume is filled as soon as
    its conversion Job exists (a tiny conversion takes seconds: later, it would be over), and freed
    once the conversion has failed (or after a minute)."""
    serial = scene.next_serial()
    name, folder = f"filled-{serial}", f"{FILE_SOURCES}/tiny-fill-{serial}"
    shutil.copytree(node_checkpoint(scene.cluster), scene.cluster.node_path(folder))
    batch = client.BatchV1Api(scene.api())
    selector = f"{MODEL_LABEL}={name},app.kubernetes.io/component=artifact"

    def job() -> str:
        found = batch.list_namespaced_job(NS, label_selector=selector).items
        return str(found[0].metadata.name) if found else ""

    def inject(hit: Hit) -> None:
        apply_model(scene, transient_conversion(name, folder))
        scene.transient.append(name)
        _wait(lambda: bool(job()), f"the conversion Job of {name}")
        filler = faults.fill_volume(scene.artifacts)
        hit.notes.append(f"filled with {filler.stat().st_size / MIB:.0f} MiB as {job()} started")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if found := _conversion_failure(scene, job()):
                hit.notes.append(f"conversion failed: {found[:200]}")
                break
            if ready(scene, name):
                hit.notes.append("the conversion finished before the volume filled: not hit")
                break
            time.sleep(1.0)
        else:
            hit.notes.append("no failure reported within 60 s of the fill")
        _lift(hit)
        faults.free_volume(scene.artifacts)

    def back(listing: Pods, hit: Hit) -> bool:
        return ready(scene, name)

    return Hit(f"artifacts volume, converting {name}", inject, back)


def _conversion_failure(scene: Scene, job: str) -> str:
    """The first failed run of the Job's pods: its step, exit code and last log line; "" if none."""
    core = client.CoreV1Api(scene.api())
    for pod in core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items:
        statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
        for status in statuses:
            ended = [
                s.terminated for s in (status.state, status.last_state) if s is not None and s.terminated
            ]
            failed = next((t for t in ended if t.exit_code != 0), None)
            if failed is not None:
                logs = scene.cluster.kubectl(
                    "logs", "-n", NS, pod.metadata.name, "-c", status.name, "--tail=5", check=False
                ).stdout.strip()
                last = logs.splitlines()[-1] if logs else ""
                return f"{status.name} exited {failed.exit_code}: {last}"
    return ""


def _wait(probe: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + ARM_SECONDS
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"arming: timed out after {ARM_SECONDS:.0f} s waiting for {what}")
        time.sleep(0.25)


BOUND = 90.0  # seconds back to whole after a fault of one process or server
SLOW_BOUND = 150.0  # after one that restarts every pod, or a Job (a fetch, a conversion) must retry

FAULTS = [
    Fault("operator", "control", BOUND, _operator),
    Fault("gate", "data", BOUND, _container("gate")),
    Fault("engine", "data", BOUND, _container("engine")),
    Fault("router", "data", BOUND, _router),
    Fault("kube-apiserver", "control", BOUND, _control_plane("kube-apiserver")),
    Fault("etcd", "control", BOUND, _control_plane("etcd")),
    Fault("prometheus", "control", BOUND, _prometheus),
    Fault("s3", "control", SLOW_BOUND, _s3, arm_last=True),
    Fault("node-agent", "outage", SLOW_BOUND, _node_agent),
    Fault("volume-full", "control", SLOW_BOUND, _volume),
    Fault("node-drain", "control", BOUND, _node_drain),
    Fault("node-loss", "outage", SLOW_BOUND, _node_loss),
]


def schedule(rng: random.Random, rounds: int, pairs: int, skip: set[str]) -> list[tuple[Fault, ...]]:
    """`rounds` passes over every fault alone (but those in `skip`), each in a drawn order, then
    `pairs` drawn pairs of them."""
    unknown = skip - {f.name for f in FAULTS}
    if unknown:
        raise ValueError(f"no fault named {sorted(unknown)}; the faults are {[f.name for f in FAULTS]}")
    chosen = [f for f in FAULTS if f.name not in skip]
    singles = [(f,) for _ in range(rounds) for f in rng.sample(chosen, len(chosen))]
    every_pair = [(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1 :]]
    drawn = rng.sample(every_pair, min(pairs, len(every_pair)))
    return [*singles, *(tuple(rng.sample(pair, 2)) for pair in drawn)]
