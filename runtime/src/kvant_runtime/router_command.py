"""`kvant router`: start smg (the SGLang Model Gateway) with its mesh peers found by DNS.

smg's mesh lets router replicas share their cache-aware prefix trees, but `--mesh-peer-urls` takes
IP:port only, and a Deployment's pods have no stable names. This launcher resolves the router's
headless Service (which lists every router pod, ready or not), drops the pod's own address, passes
the others as peers and execs smg. Peers that start later find this pod the same way, and smg's
gossip spreads membership from there. Replicas that start together wait (bounded) until the Service
lists as many pods as the Deployment wants, so two fresh replicas do not each start alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable

log = logging.getLogger("kvant.router")
Resolver = Callable[[str], set[str]]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "router",
        help="run smg (the router role) with its mesh peers resolved from a headless Service",
        description="Resolves --mesh-service to the router pods' addresses, passes the others to smg as "
        "--mesh-peer-urls, and execs `smg SMG_ARGS...`.",
    )
    parser.add_argument("--mesh-service", required=True, metavar="NAME", help="the routers' headless Service")
    parser.add_argument("--mesh-port", type=int, required=True, metavar="PORT")
    parser.add_argument("--replicas", type=int, required=True, help="router pods the Deployment wants")
    parser.add_argument(
        "--wait-seconds", type=float, default=30.0, help="longest wait for the other replicas (default: 30)"
    )
    parser.add_argument("smg_args", nargs=argparse.REMAINDER, help="-- then smg's own arguments")
    parser.set_defaults(run=run)


def resolve(name: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return set()  # not published yet, or no DNS: try again, then start without peers


def find_peers(
    service: str,
    own_ip: str,
    replicas: int,
    wait_seconds: float,
    *,
    lookup: Resolver = resolve,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """The other router pods' addresses: as soon as the Service lists `replicas` pods, else whatever
    it lists when the wait ends (possibly none: this pod then starts alone, and later peers join it)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        found = lookup(service)
        if len(found | {own_ip}) >= replicas or time.monotonic() >= deadline:
            return sorted(found - {own_ip})
        sleep(1.0)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    smg_args = args.smg_args[1:] if args.smg_args[:1] == ["--"] else args.smg_args
    smg = shutil.which("smg")
    if smg is None:
        print("kvant router: smg is not installed in this image (pip install smg)", file=sys.stderr)
        return 2
    own_ip = os.environ.get("POD_IP", "")
    peers = find_peers(args.mesh_service, own_ip, args.replicas, args.wait_seconds, lookup=resolve)
    log.info("event=router.start mesh_service=%s own_ip=%s peers=%s", args.mesh_service, own_ip, peers)
    if peers:
        urls = [f"[{peer}]:{args.mesh_port}" if ":" in peer else f"{peer}:{args.mesh_port}" for peer in peers]
        smg_args = [*smg_args, "--mesh-peer-urls", *urls]
    os.execv(smg, [smg, *smg_args])
