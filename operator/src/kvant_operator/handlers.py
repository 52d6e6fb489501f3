"""kopf wiring: one long-lived daemon per QuantizedModel that reconciles when woken or on a timer.

A watch event only wakes the model's daemon, so reconciles of one model never overlap, and nothing is
written when nothing changed. kopf keeps no progress annotations here (daemons need none).
kopf also indexes the objects Kvant applies and the models' pods (kube_cache.py), so a settled model's
reconcile reads them from memory: an idle operator sends no requests beyond its watches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from kvant_operator import operator_metrics
from kvant_operator.api.resource import GROUP, PLURAL, VERSION
from kvant_operator.api.status import Phase
from kvant_operator.kube import RECONCILE_THREADS, Kube, api_client
from kvant_operator.kube_cache import (
    PODS,
    PODS_SELECTOR,
    SERVING_KINDS,
    SERVING_SELECTOR,
    CachedKube,
    pod_entry,
    serving_entry,
)
from kvant_operator.namespace_nudge import kvant_pods_left, nudge_if_deleting
from kvant_operator.object_keys import MODEL_LABEL
from kvant_operator.protection.loop import ProtectionResult, Protector
from kvant_operator.protection.schedule import ModelProtection
from kvant_operator.reconcile import Outcome, Reconciler
from kvant_operator.settings import OperatorSettings

log = logging.getLogger("kvant.operator")
_phases: dict[tuple[str, str], str] = {}
# (namespace, model) → its daemon's wakeup, for the events of what the model owns (wake_model).
_wakeups: dict[tuple[str, str], asyncio.Event] = {}
DEPLOYMENTS = next(kind for kind in SERVING_KINDS if kind.kind == "Deployment")


async def _index_serving(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Any] | None:
    return serving_entry(body)


async def _index_pod(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Any] | None:
    return pod_entry(body)


for _kind in SERVING_KINDS:
    kopf.index(group=_kind.group, version=_kind.version, plural=_kind.plural, id=_kind.index_id)(
        _index_serving
    )
kopf.index(group=PODS.group, version=PODS.version, plural=PODS.plural, id=PODS.index_id)(_index_pod)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    settings.posting.level = logging.WARNING  # our own Events say what happened; kopf's would repeat it
    # asyncio.to_thread's pool: min(32, CPUs + 4) threads by default, 6 on 2 CPUs.
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=RECONCILE_THREADS, thread_name_prefix="reconcile")
    )
    settings.watching.server_timeout = 300
    # The indexed watches select on the server: a cluster's other ConfigMaps and pods never arrive.
    for kind in SERVING_KINDS:
        settings.watching.label_selectors[kind.group, kind.version, kind.plural] = SERVING_SELECTOR
    settings.watching.label_selectors[PODS.group, PODS.version, PODS.plural] = PODS_SELECTOR
    # kopf hands each index to every handler as a keyword named by its id.
    indexes = {kind: kwargs[kind.index_id] for kind in (*SERVING_KINDS, PODS)}
    door = Kube(api_client())
    memo["door"] = door
    kube = CachedKube(door, indexes)
    memo["reconciler"] = Reconciler(kube, OperatorSettings.from_env())
    memo["protector"] = Protector(kube)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def wake(memo: kopf.Memo, **_: Any) -> None:
    _wake(memo.get("wakeup"))


# A Deployment's or pod's event wakes the model it belongs to: all a rollout waits on. kopf runs these
# after it has indexed the event, so the pass they wake reads what woke it.
@kopf.on.event(DEPLOYMENTS.group, DEPLOYMENTS.version, DEPLOYMENTS.plural)
@kopf.on.event(PODS.group, PODS.version, PODS.plural)
async def wake_model(body: kopf.Body, **_: Any) -> None:
    model = (body["metadata"].get("labels") or {}).get(MODEL_LABEL)
    if model:
        _wake(_wakeups.get((body["metadata"]["namespace"], model)))


# The last Kvant pod of a namespace being deleted brings the namespace controller's next pass forward
# (namespace_nudge). kopf removes a deleted pod from the index before it runs this.
@kopf.on.event(PODS.group, PODS.version, PODS.plural)
async def namespace_emptied(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    namespace = body["metadata"]["namespace"]
    if event.get("type") != "DELETED" or kvant_pods_left(kwargs[PODS.index_id], namespace):
        return
    await asyncio.to_thread(nudge_if_deleting, memo["door"], namespace)


def _wake(wakeup: asyncio.Event | None) -> None:
    if wakeup is not None and not wakeup.is_set():
        wakeup.set()
        operator_metrics.PENDING.inc()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def model_daemon(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    wakeup = asyncio.Event()
    memo["wakeup"] = wakeup
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    _wakeups[key] = wakeup
    reconciler: Reconciler = memo["reconciler"]
    protector = ModelProtection(memo["protector"])
    settings = reconciler.settings
    failures, woken, last_resync, settled = 0, True, 0.0, False
    try:
        while not stopped:
            interval = settings.idle_interval
            try:
                plain = _plain(body)
                protection = await asyncio.to_thread(protector.step_if_due, plain)
                # A settled model is re-applied only when something may have changed: a watch event
                # woke it, or a periodic resync is due (which also repairs objects edited by hand).
                resync = woken or not settled or time.monotonic() - last_resync > settings.resync_interval
                outcome = await asyncio.to_thread(
                    _reconcile_once, reconciler, plain, protection, resync, protector.pod_work
                )
                last_resync = time.monotonic() if resync else last_resync
                settled = not outcome.busy
                # A rollout is watched (wake_model), so a model waiting on one is not polled at the busy
                # interval: 1,000 models rolling out would otherwise mean 500 reconciles a second.
                polled = outcome.busy and outcome.status["phase"] != Phase.DEPLOYING.value
                interval = min(
                    settings.busy_interval if polled else settings.idle_interval,
                    protector.seconds_to_next(),
                )
                failures = 0
            except Exception as err:  # API trouble or a bug: back off, keep serving the other models
                failures += 1
                interval = min(60.0, settings.busy_interval * 2**failures)
                operator_metrics.RECONCILES.labels("error").inc()
                transient = isinstance(err, (ApiException, OSError))
                log.log(
                    logging.WARNING if transient else logging.ERROR,
                    "reconcile of %s failed (%s); retrying in %.0fs",
                    _name(body),
                    err,
                    interval,
                    exc_info=not transient,
                )
            try:
                await asyncio.wait_for(wakeup.wait(), timeout=interval)
                operator_metrics.PENDING.dec()
                woken = True
            except TimeoutError:
                woken = False
            wakeup.clear()
    finally:  # also when kopf cancels the daemon (a deleted model): forget its series either way
        if _wakeups.get(key) is wakeup:
            del _wakeups[key]
        _phases.pop(key, None)
        operator_metrics.forget_model(body["metadata"]["namespace"], body["metadata"]["name"])
        _publish_phase_counts()


def _reconcile_once(
    reconciler: Reconciler,
    body: dict[str, Any],
    protection: ProtectionResult | None,
    resync: bool,
    pod_work: dict[str, float],
) -> Outcome:
    started = time.monotonic()
    outcome = reconciler.reconcile(body, protection, resync, pod_work=pod_work)
    meta = body["metadata"]
    if _changed(body.get("status") or {}, outcome.status):
        reconciler.kube.patch_status(meta["namespace"], meta["name"], outcome.status)
    for kind, reason, message in outcome.events:
        reconciler.kube.event(body, kind, reason, message)
    operator_metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
    operator_metrics.RECONCILES.labels("busy" if outcome.busy else "settled").inc()
    if (meta["namespace"], meta["name"]) not in _wakeups:
        return outcome  # its daemon was cancelled (a deleted model) while this pass ran in its thread
    _phases[(meta["namespace"], meta["name"])] = outcome.status["phase"]
    operator_metrics.publish_conditions(meta["namespace"], meta["name"], outcome.status["conditions"])
    _publish_replicas(meta["namespace"], meta["name"], outcome.status.get("autoscaling"))
    _publish_phase_counts()
    return outcome


def _publish_replicas(namespace: str, model: str, scaling: dict[str, Any] | None) -> None:
    """The autoscaler's counts as series, for the dashboard and the at-max alert; from the first pass
    with spec.autoscaling, before the HPA reports, so the alert can see a model whose metrics are
    missing too."""
    if not scaling:
        operator_metrics.forget_replicas(namespace, model)
        return
    operator_metrics.publish_replicas(
        namespace,
        model,
        current=scaling.get("currentReplicas", 0),
        desired=scaling.get("desiredReplicas", 0),
        minimum=scaling["minReplicas"],
        maximum=scaling["maxReplicas"],
    )


def _changed(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    return any(_without_nulls(live.get(key)) != _without_nulls(value) for key, value in desired.items())


def _without_nulls(value: Any) -> Any:
    """A null in a merge patch deletes the key, so {"a": None} and {} describe the same status."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _plain(body: kopf.Body) -> dict[str, Any]:
    """A detached copy of the live body, so a reconcile in a thread sees one consistent object."""
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": dict(body["metadata"]),
        "spec": dict(body["spec"]),
        "status": dict(body.get("status") or {}),
    }


def _name(body: kopf.Body) -> str:
    return f"{body['metadata']['namespace']}/{body['metadata']['name']}"


def _publish_phase_counts() -> None:
    counts: dict[str, int] = {}
    # A copy: reconciles of other models, in other threads, add to _phases meanwhile.
    for phase in list(_phases.values()):
        counts[phase] = counts.get(phase, 0) + 1
    operator_metrics.MODELS.clear()
    for phase, count in counts.items():
        operator_metrics.MODELS.labels(phase).set(count)
