"""A deleted namespace that does not wait out the serving pods' grace period.

Kubernetes' namespace controller deletes a namespace's pods first (OrderedNamespaceDeletion) and, while
any is still terminating, looks again only after half the longest terminationGracePeriodSeconds among
them plus a second (`namespace_controller.go`: 908 s for a serving pod's 1,815 s), although an idle
serving pod drains and exits in seconds. Any change to the Namespace object brings that pass forward to
5 s after the change (`enqueueNamespace`; its delaying queue keeps the sooner time). So when the last
Kvant pod of a terminating namespace is gone, the operator writes one annotation on the Namespace, and
the controller's next pass comes 5 s later instead of minutes.

The write needs `get` and `patch` on that namespace (the chart's RBAC; a ValidatingAdmissionPolicy in
the chart lets the operator change nothing of a Namespace but this annotation, see docs/security.md).
Without them the operator logs it once, and namespaces go at Kubernetes' own pace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvant_operator.kube import Kube
from kvant_operator.object_keys import PODS_GONE_ANNOTATION

log = logging.getLogger("kvant.operator")

_refused: set[str] = set()


def kvant_pods_left(pods: Mapping[tuple[str, ...], Iterable[Any]], namespace: str) -> int:
    """Kvant's pods of `namespace` still in the operator's pod index (keyed ("model", namespace, model))."""
    return sum(len(list(entries)) for key, entries in pods.items() if len(key) == 3 and key[1] == namespace)


def nudge_if_deleting(kube: Kube, namespace: str) -> bool:
    """Annotates `namespace` if it is being deleted; says whether it did. Never raises for the API's
    answers: a write the operator may not make leaves the namespace to Kubernetes' own pace."""
    try:
        if not kube.namespace_deleting(namespace):
            return False
        kube.annotate_namespace(
            namespace, PODS_GONE_ANNOTATION, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
    except ApiException as err:
        if err.status == 404:
            return False
        if namespace not in _refused:  # once per namespace, not on every pod of every model
            _refused.add(namespace)
            log.warning(
                "could not mark namespace %s as emptied of Kvant's pods (%s %s); its deletion follows "
                "Kubernetes' own pace (the serving pods' grace period)",
                namespace,
                err.status,
                err.reason,
            )
        return False
    log.info("event=namespace_nudged namespace=%s: its Kvant pods are gone", namespace)
    return True
