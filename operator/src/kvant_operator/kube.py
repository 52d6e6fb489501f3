"""The operator's only door to the API server: get, list, apply (server-side), create, delete, logs, status.

Everything here is synchronous (the kubernetes client); handlers call it through asyncio.to_thread.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, dynamic
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from kvant_contracts.kube_object import Obj
from kvant_operator import operator_metrics
from kvant_operator.api.resource import GROUP, PLURAL, VERSION
from kvant_operator.kube_door import ensure_applied

FIELD_MANAGER = "kvant"
# Reconciles run in threads (the client is synchronous) and mostly wait on the API server, so more run
# at once than there are CPUs: on a model's first pass, 8 applies and a status write one after another.
RECONCILE_THREADS = 16
log = logging.getLogger("kvant.operator.kube")


def _counted(api: client.ApiClient) -> client.ApiClient:
    """Counts every request this client sends (typed and dynamic calls both go through call_api)."""
    send = api.call_api

    def call_api(resource_path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        operator_metrics.API_REQUESTS.labels(method).inc()
        return send(resource_path, method, *args, **kwargs)

    api.call_api = call_api
    return api


def api_client() -> Any:
    configuration = client.Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        kube_config.load_kube_config(client_configuration=configuration)
    # One pooled connection per reconcile thread; the client's default (5 per CPU) would make each
    # thread past it open, and then drop, a new TLS connection per request.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, RECONCILE_THREADS)
    return client.ApiClient(configuration)


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = _counted(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic = dynamic.DynamicClient(api)
        self._resources: dict[tuple[str, str], Any] = {}

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self._dynamic.resources.get(api_version=api_version, kind=kind)
        return self._resources[key]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            found: Obj = self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Obj]:
        items = self._resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        return [item.to_dict() for item in items.items]

    def ensure(self, obj: Obj) -> bool:
        """Server-side applies `obj` unless the live object already carries its applied hash."""
        return ensure_applied(self, obj)

    def apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        stored: Obj = (
            self._resource(obj["apiVersion"], obj["kind"])
            .server_side_apply(
                body=obj,
                name=meta["name"],
                namespace=meta["namespace"],
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
            .to_dict()
        )
        log.info("applied %s %s/%s", obj["kind"], meta["namespace"], meta["name"])
        return stored

    def create(self, obj: Obj) -> Obj | None:
        """Creates `obj` and returns it as stored; None when it already exists (names are
        deterministic, so that is success)."""
        try:
            created: Obj = (
                self._resource(obj["apiVersion"], obj["kind"])
                .create(body=obj, namespace=obj["metadata"]["namespace"])
                .to_dict()
            )
        except ApiException as err:
            if err.status == 409:
                return None
            raise
        log.info("created %s %s/%s", obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        return created

    def add_owner(self, api_version: str, kind: str, live: Obj, owner: Obj) -> None:
        owners = live["metadata"].get("ownerReferences") or []
        if any(o.get("uid") == owner["uid"] for o in owners):
            return
        patch = {
            "metadata": {
                "ownerReferences": [*owners, owner],
                "resourceVersion": live["metadata"]["resourceVersion"],
            }
        }
        self._resource(api_version, kind).patch(
            body=patch,
            name=live["metadata"]["name"],
            namespace=live["metadata"]["namespace"],
            content_type="application/merge-patch+json",
        )

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"preconditions": {"uid": uid}}
            )
        except ApiException as err:
            if err.status in (404, 409):  # gone already, or a successor of the same name
                return
            raise
        log.info("deleted %s %s/%s", kind, namespace, name)

    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None) -> str:
        try:
            # Raw bytes: the client would otherwise "deserialize" a JSON log line into a Python repr.
            response = self.core.read_namespaced_pod_log(
                pod, namespace, container=container, tail_lines=tail_lines, _preload_content=False
            )
        except ApiException as err:
            if err.status in (400, 404):
                return ""
            raise
        return bytes(response.data).decode(errors="replace")

    def namespace_deleting(self, name: str) -> bool:
        """Whether the namespace `name` is being deleted (False once it is gone)."""
        try:
            found = self.core.read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return found.metadata.deletion_timestamp is not None

    def annotate_namespace(self, name: str, key: str, value: str) -> None:
        """Sets one annotation on a Namespace (the only write Kvant makes to one: namespace_nudge)."""
        self.core.patch_namespace(name, {"metadata": {"annotations": {key: value}}})

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {key: value}}})

    def patch_status(self, namespace: str, name: str, status: Obj) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}
        )

    def event(self, body: Obj, kind: str, reason: str, message: str) -> None:
        meta = body["metadata"]
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=body["apiVersion"],
                kind=body["kind"],
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta["uid"],
            ),
            type=kind,
            reason=reason,
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component="kvant-operator"),
            reporting_component="kvant.dev/operator",
            reporting_instance="kvant-operator",
        )
        try:
            self.core.create_namespaced_event(meta["namespace"], event)
        except ApiException as err:  # an event is best effort; the status carries the truth
            log.warning(
                "event %s for %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], err.reason
            )
