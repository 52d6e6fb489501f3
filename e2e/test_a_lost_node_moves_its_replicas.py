"""A node drained, restarted and lost under load (#40): a model with two replicas and two routers, spread
over two nodes by default.

Drained (cordon, then every pod evicted through the Eviction API, which the PodDisruptionBudgets
answer, as `kubectl drain` does): the pods move to the other node and every client is answered.

Restarted: the node is down for a few seconds and reports again, as after a reboot; its pods start
again where they were.

Lost: one node stops reporting, as a node that lost power does (its pods die and nobody says so,
kvant_dev.nodeagent.node_faults). Kubernetes' own controllers move the replicas: the node lifecycle
controller marks the node Unknown after its grace period (20 s in the local cluster, 40 s by default)
and its pods not ready, the taint manager evicts them after `lostNodeSeconds`, and the Deployments
start replacements on the node left.

- The default placement spreads the engines and the routers over the two nodes.
- A drain moves them with no request failing (200, or one of Kvant's refusals).
- A restart (the node down for a few seconds, back inside its grace period) moves nothing: its pods
  start again in place and serve within 60 s, and no client gets a 404.
- Through the whole fault no client gets a 404, and every answer that is not 200 is one of Kvant's
  refusals (429, 503, 408) or no answer at all (0): a request on the lost node, or sent there by
  the Service or the router before they drop it, gets none, as it would in any cluster; those are
  counted, and only requests sent before the model is whole again may meet it.
- Both replicas and both routers serve again within `lostNodeSeconds` plus the node's grace period
  plus a start (the bound is stated below), and every request after that is answered 200.
- The node back, its evicted pods' deletions complete (the namespace can go).
"""

from __future__ import annotations

import datetime
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, service_url, serving_pods, wait_ready
from e2e.test_router_discovers_engines_and_serves import ask, workers
from kvant_dev import faults
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL
from kvant_operator.render.roles import RoleKind

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]
MODEL = "routed"  # ask() names this model to smg
LOST_NODE_SECONDS = 10  # spec.serving.placement.lostNodeSeconds: the lost node's pods leave this late
NODE_GRACE_SECONDS = 20  # the local cluster's --node-monitor-grace-period (kvant_dev.controlplane)
# The replicas serve elsewhere within the grace period, the toleration and a simulator start (a pod's
# start, smg's discovery: about 30 s on a loaded 2-core machine), with room for the controllers' own
# periods (the node monitor runs every 5 s, the taint manager acts on the next update).
RECOVERY_BOUND_SECONDS = NODE_GRACE_SECONDS + LOST_NODE_SECONDS + 90
# A node that restarts: down this long (well inside the grace period), and its pods serve again within
# the bound (a simulator start and smg's next health check, on a loaded 2-core machine).
RESTART_DOWN_SECONDS = 5
RESTART_BOUND_SECONDS = 60
CLIENTS = 3
REFUSALS = {429, 503, 408}


@pytest.fixture
def second_node(cluster) -> Iterator[str]:
    """The local cluster's spare node, schedulable for this test; cordoned again, and back if it was
    lost, when the test ends."""
    name = cluster.spare_node_names[0]
    cluster.kubectl("uncordon", name)
    try:
        yield name
    finally:
        cluster.restore_node(name)
        cluster.kubectl("cordon", name)


class Load:
    """Client threads asking through the model's Service in a closed loop, recording when each request
    was sent and its status (0: no answer: the connection failed, or nothing came within 30 s)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[float, int]] = []  # (sent at, status)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)

    def _client(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            code = ask(self.url, secrets.token_hex(16), 16, timeout=30)
            with self._lock:
                self.answers.append((sent, code))
            if code != 200:
                time.sleep(0.5)  # a client backs off a little after a refusal

    def codes(self, since: float = 0.0, until: float = float("inf")) -> Counter[int]:
        with self._lock:
            return Counter(code for at, code in self.answers if since <= at < until)


def _pods(core: client.CoreV1Api, namespace: str, kind: RoleKind) -> list[client.V1Pod]:
    selector = f"{MODEL_LABEL}={MODEL},{KIND_LABEL}={kind.value}"
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def _ready_elsewhere(core: client.CoreV1Api, namespace: str, kind: RoleKind, lost: str) -> list[str]:
    """The nodes of the role's ready pods that are not being deleted and not on the lost node."""
    nodes = []
    for pod in _pods(core, namespace, kind):
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if ready and pod.metadata.deletion_timestamp is None and pod.spec.node_name != lost:
            nodes.append(pod.spec.node_name)
    return nodes


def _spread(core: client.CoreV1Api, namespace: str) -> tuple[set[str], set[str]]:
    """The nodes of the model's engines and of its routers (pods not being deleted)."""

    def nodes(kind: RoleKind) -> set[str]:
        return {
            p.spec.node_name for p in _pods(core, namespace, kind) if p.metadata.deletion_timestamp is None
        }

    return nodes(RoleKind.ENGINE), nodes(RoleKind.ROUTER)


def _whole(core: client.CoreV1Api, namespace: str, url: str, away_from: str) -> bool:
    """Two engines and two routers ready off `away_from`, and the router sees both engines."""
    engines = _ready_elsewhere(core, namespace, RoleKind.ENGINE, away_from)
    routers = _ready_elsewhere(core, namespace, RoleKind.ROUTER, away_from)
    return len(engines) == 2 and len(routers) == 2 and workers(url) == 2


def _started_again(core: client.CoreV1Api, namespace: str, node: str, since: datetime.datetime) -> bool:
    """Every pod of the model on `node` ready, with each container started after `since`."""
    pods = [p for p in core.list_namespaced_pod(namespace).items if p.spec.node_name == node]
    for pod in pods:
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        running = [s.state.running for s in pod.status.container_statuses or []]
        if not ready or not running or any(r is None or r.started_at < since for r in running):
            return False
    return bool(pods)


def test_a_drained_and_a_lost_node_move_the_replicas_and_no_client_gets_a_404(
    cluster, operator, namespace, tiny_model, second_node
):
    model = tiny_model(
        MODEL,
        kvCache={"dtype": "bf16"},
        serving={
            "engine": "simulator",
            "replicas": 2,
            "gpu": {"memoryGiB": 2},
            "memFractionStatic": 0.9,
            "placement": {"lostNodeSeconds": LOST_NODE_SECONDS},
        },
        limits={"maxConcurrency": 8, "maxQueued": 16, "queueTimeoutSeconds": 10},
    )
    apply(cluster, namespace, model)
    wait_ready(cluster, namespace, MODEL, timeout=240)
    url = service_url(cluster, namespace, MODEL)
    wait_for(lambda: workers(url) == 2 or None, 90, "smg to register both engine pods")
    core = client.CoreV1Api(cluster.api_client())
    both = {"kvant-gpu-0", second_node}
    engines, routers = _spread(core, namespace)
    assert engines == routers == both, (engines, routers)

    # 1. The second node drained under load: everything moves to the first, every client answered.
    with Load(url) as load:
        time.sleep(3)
        drain_at = time.monotonic()
        _, refused = faults.drain_node(cluster, second_node, namespace)
        wait_for(lambda: _whole(core, namespace, url, second_node), 180, "the model whole after the drain")
        moved_at = time.monotonic()
        time.sleep(3)
    drained = load.codes(drain_at)
    print(
        f"drain: whole again at {moved_at - drain_at:.0f} s; PDB refusals {refused}; answers {dict(drained)}"
    )
    assert drained[200] > 0 and set(drained) <= {200, *REFUSALS}, drained

    # Back to one engine and one router a node: the ones deleted here start where there are none.
    cluster.kubectl("uncordon", second_node)
    for kind in (RoleKind.ENGINE, RoleKind.ROUTER):
        live = [p for p in _pods(core, namespace, kind) if p.metadata.deletion_timestamp is None]
        cluster.kubectl("delete", "pod", "-n", namespace, "--wait=false", live[0].metadata.name)
    wait_for(
        lambda: (_spread(core, namespace) == (both, both) and _whole(core, namespace, url, "")) or None,
        180,
        "one engine and one router on each node again",
    )

    # 2. The second node restarted under load: down for a few seconds, back well inside its grace
    # period, so nothing is evicted; its pods start again where they were, as after a reboot.
    with Load(url) as load:
        time.sleep(3)
        restart_at = time.monotonic()
        restart_wall = datetime.datetime.now(datetime.UTC).replace(microsecond=0)  # as pod statuses say it
        cluster.lose_node(second_node)
        time.sleep(RESTART_DOWN_SECONDS)
        cluster.restore_node(second_node)

        def back() -> bool:
            started = _started_again(core, namespace, second_node, restart_wall)
            return started and _whole(core, namespace, url, "")

        wait_for(back, RESTART_BOUND_SECONDS, "the restarted node's pods to serve again", interval=1)
        back_at = time.monotonic()
        time.sleep(5)
    restarted = load.codes(restart_at)
    print(f"node restart: whole again at {back_at - restart_at:.0f} s; answers {dict(restarted)}")
    # The restarted pods have new addresses, as a rebooted node's sandboxes get from its CNI: a
    # connection routed to the old router before the restart cannot reach the new one before it is
    # Ready (kvant_dev.nodeagent.agent, _allocate_ip). With the old address kept, one rehearsal in two
    # saw smg's 404 from the restarted router in the second before its first discovery.
    assert 404 not in restarted, restarted
    assert set(restarted) <= {200, 0, *REFUSALS}, restarted
    assert _spread(core, namespace) == (both, both), "a restart moves nothing"

    # 3. The second node lost under load.
    with Load(url) as load:
        time.sleep(5)
        lost_at = time.monotonic()
        cluster.lose_node(second_node)

        def node_marked() -> bool:
            node = core.read_node(second_node)
            return any(c.type == "Ready" and c.status != "True" for c in node.status.conditions or [])

        wait_for(node_marked, NODE_GRACE_SECONDS + 40, "the node controller to mark the node", interval=1)
        marked_at = time.monotonic()

        wait_for(
            lambda: _whole(core, namespace, url, second_node),
            RECOVERY_BOUND_SECONDS,
            "two replicas and routers elsewhere",
            interval=2,
        )
        whole_at = time.monotonic()
        time.sleep(10)  # load on the model made whole
    during, after = load.codes(lost_at, whole_at), load.codes(whole_at + 5)
    print(
        f"node lost: marked at {marked_at - lost_at:.0f} s, whole again at {whole_at - lost_at:.0f} s "
        f"(bound {RECOVERY_BOUND_SECONDS} s); answers during {dict(during)}, after {dict(after)}"
    )
    assert 404 not in during and 404 not in after, (during, after)
    assert set(during) <= {200, 0, *REFUSALS}, during
    # No answer at all only for requests sent before the model was whole again (`after` starts 5 s
    # later and must be all 200): one the Service gave the lost node's router (until the node is
    # marked and its endpoints withdrawn), or one whose tries smg gave the lost engine, which stays in
    # its pool until the pod is evicted (marked + lostNodeSeconds); smg waits 10 s on each connection
    # to it before trying another, so three such tries outlast the client's 30 s. A rehearsal saw
    # one sent 10 s after the marking (2026-12-05); docs/concepts/placement.md, "A lost node".
    assert during[200] > 0 and set(after) == {200}, (during, after)

    # The node back: the deletions its evicted pods waited for complete, as a rebooted kubelet does.
    cluster.restore_node(second_node)
    wait_for(
        lambda: (
            not [p for p in core.list_namespaced_pod(namespace).items if p.spec.node_name == second_node]
            or None
        ),
        60,
        "the evicted pods' deletions to complete once the node reports again",
    )
    wait_ready(cluster, namespace, MODEL, timeout=60)
    assert len(serving_pods(cluster, namespace, MODEL)) == 2
