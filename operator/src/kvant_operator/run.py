"""`kvant run`: the operator process (kopf), with peering, health endpoints, metrics and JSON logs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random


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

    from kvant_operator import handlers, metrics  # noqa: F401, PLC0415 - registers the handlers

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.JSON, log_refkey="object")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    metrics.serve(args.metrics_host, args.metrics_port)
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            peering_name=args.peering,
            priority=args.priority if args.priority is not None else random.randrange(1, 2**31),
            standalone=args.peering is None,
            liveness_endpoint=args.liveness,
        )
    )
    return 0
