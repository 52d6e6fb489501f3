"""`kvant gate`: the token-aware admission gate in front of one engine."""

from __future__ import annotations

import argparse
import logging
import urllib.parse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "gate",
        help="run the admission gate (a reverse proxy) in front of an SGLang engine",
        description="Admits requests by concurrency and KV tokens, queues or answers 429 over the "
        "limits, and follows the limits file live. Its own metrics are at /gate/metrics.",
    )
    parser.add_argument(
        "--listen", type=host_port, required=True, metavar="HOST:PORT", help="where clients connect"
    )
    parser.add_argument(
        "--upstream",
        type=upstream_url,
        required=True,
        metavar="URL",
        help="the engine, e.g. http://127.0.0.1:30001",
    )
    parser.add_argument(
        "--limits", type=Path, required=True, metavar="FILE", help="the limits file (YAML or JSON)"
    )
    parser.add_argument(
        "--metrics-listen",
        type=host_port,
        metavar="HOST:PORT",
        help="also serve, on this address, /metrics (the gate's metrics followed by the engine's, for a "
        "PodMonitor) and /engine/health (the engine's /health, for its probes); the engine itself can "
        "then listen on loopback only",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between limits-file checks and engine /metrics reads (default: 1)",
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="a file holding the admin token that opens SGLang's admin routes (a mounted Secret); "
        "without it they are closed",
    )
    parser.add_argument(
        "--api-keys-file",
        type=Path,
        metavar="FILE",
        help="a file of client API keys, one per line (a mounted Secret); with it, requests need "
        "`Authorization: Bearer <key>`",
    )
    parser.add_argument(
        "--planned-kv-tokens",
        type=int,
        metavar="TOKENS",
        help="the plan's KV tokens per replica: the token budget until the engine reports its own",
    )
    parser.add_argument("--debug", action="store_true", help="debug logging, with tracebacks")
    parser.set_defaults(run=run)


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT such as 0.0.0.0:30000, got {text!r}")
    return host.strip("[]"), int(port)


def upstream_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"expected the engine's base URL such as http://127.0.0.1:30001, got {text!r}"
        )
    return text.rstrip("/")


def run(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415 - the registrar stays import-light

    from kvant_contracts.limits import LimitsError  # noqa: PLC0415
    from kvant_runtime.gate.gate_server import GateConfig, serve_until_signalled  # noqa: PLC0415

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    config = GateConfig(
        listen=args.listen,
        upstream=args.upstream,
        limits_path=args.limits,
        metrics_listen=args.metrics_listen,
        interval=args.interval,
        admin_token_file=args.admin_token_file,
        api_keys_file=args.api_keys_file,
        planned_kv_tokens=args.planned_kv_tokens
        if args.planned_kv_tokens and args.planned_kv_tokens > 0
        else None,
    )
    try:
        asyncio.run(serve_until_signalled(config))
    except (LimitsError, OSError) as err:
        if args.debug:
            raise
        logging.getLogger("kvant.gate").error("event=gate_not_started error=%s", err)
        return 2 if isinstance(err, LimitsError) else 1
    return 0
