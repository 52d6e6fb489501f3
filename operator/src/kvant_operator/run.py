"""`kvant run`: the operator process (kopf), with peering, health endpoints, metrics and JSON logs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import time

_PEERING_WAIT_S = 300.0
log = logging.getLogger("kvant.operator")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("run", help="run the Kvant operator")
    parser.add_argument(
        "--namespace", action="append", default=[], help="watch only this namespace (repeat); default: all"
    )
    parser.add_argument(
        "--peering",
        default=None,
        help="KopfPeering name for leader election between replicas (default: none)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority: the highest live replica leads (default: random; tied replicas all pause)",
    )
    parser.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="liveness/readiness endpoint"
    )
    parser.add_argument("--metrics-host", default="0.0.0.0")
    parser.add_argument("--metrics-port", type=int, default=9090)
    parser.add_argument("--verbose", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import kopf  # noqa: PLC0415 - only the operator command needs kopf loaded

    from kvant_operator import (  # noqa: F401, PLC0415 - registers the handlers
        handlers,
        kopf_session,
        operator_metrics,
    )

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.JSON, log_refkey="object")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    # kopf logs every watch-event handler call at INFO ("Handler 'wake' succeeded"): one line per
    # event per model. Kvant logs its own decisions; kopf's warnings and errors still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.peering:
        wait_for_peering(args.peering, args.namespace)
    operator_metrics.serve(args.metrics_host, args.metrics_port)
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            peering_name=args.peering,
            priority=args.priority if args.priority is not None else random.randrange(1, 2**31),
            standalone=args.peering is None,
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(watched_namespaces=len(args.namespace)),  # kopf_session's connection bound
        )
    )
    return 0


def wait_for_peering(name: str, namespaces: list[str]) -> None:
    """Helm creates custom resources after Deployments, so the peering object may not exist yet.
    kopf would then run every replica unpeered until its next keep-alive; wait for it instead."""
    from kubernetes.client import CustomObjectsApi  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from kvant_operator.kube import api_client  # noqa: PLC0415

    custom = CustomObjectsApi(api_client())
    deadline = time.monotonic() + _PEERING_WAIT_S
    while True:
        try:
            for namespace in namespaces:
                custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", name)
            if not namespaces:
                custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
            return
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        log.info("waiting for the peering object %s before leading or standing by", name)
        time.sleep(2.0)
