"""`kvant gate`: the token-aware admission gate in front of one engine."""

from __future__ import annotations

import argparse
import logging
import re
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from kvant_contracts.serving_pod import API_CREDENTIALS_DIR

if TYPE_CHECKING:
    from kvant_runtime.gate.limits_watch import LimitsConfigMap

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


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
        "--limits-configmap",
        type=configmap_ref,
        metavar="NAMESPACE/NAME",
        help="also follow this ConfigMap's limits.yaml through the API server (in a pod: the "
        f"ServiceAccount token and CA in {API_CREDENTIALS_DIR}); an edit then applies within a second "
        "instead of on the kubelet's next sync of the file, which stays the fallback while the API "
        "cannot be read",
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
    parser.add_argument(
        "--relay",
        type=host_port,
        metavar="HOST:PORT",
        help="relay TCP on HOST:PORT to the same port on the upstream's host: a prefill engine's "
        "bootstrap port, which SGLang binds to its own (loopback) host; HOST is the pod IP",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        metavar="DIR",
        help="count prompt tokens with the model's tokenizer and chat template in DIR (the served "
        "folder), as the engine does; without one, bytes/4 corrected by the engine's reported counts",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --tokenizer load the folder's own tokenizer code (its tokenizer_config.json auto_map), "
        "as the engine does under SGLang's flag of this name; without it such a folder is refused",
    )
    parser.add_argument(
        "--drain-seconds",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="on SIGTERM the gate drains: its readiness (/health) answers 503 while it goes on serving, "
        "and it exits once what it holds has ended and nothing new arrives, or after this many seconds "
        "at most (a pod's terminationGracePeriodSeconds must cover it). A second signal stops it at "
        "once. Default: 30",
    )
    parser.add_argument("--debug", action="store_true", help="debug logging, with tracebacks")
    parser.set_defaults(run=run)


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT such as 0.0.0.0:30000, got {text!r}")
    return host.strip("[]"), int(port)


def non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds ≥ 0 such as 300, got {text!r}")
    return seconds


def configmap_ref(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME such as serving/tiny-limits, got {text!r}")
    return namespace, name


def upstream_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"expected the engine's base URL such as http://127.0.0.1:30001, got {text!r}"
        )
    return text.rstrip("/")


def upstream_host(upstream: str) -> str:
    return urllib.parse.urlsplit(upstream).hostname or "127.0.0.1"


def run(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415 - the registrar stays import-light

    from kvant_contracts.limits import LimitsError  # noqa: PLC0415
    from kvant_runtime.gate.draining import SHUTDOWN_GRACE_SECONDS  # noqa: PLC0415
    from kvant_runtime.gate.gate_server import GateConfig, serve_until_signalled  # noqa: PLC0415
    from kvant_runtime.gate.port_relay import RelayConfig  # noqa: PLC0415
    from kvant_runtime.tokenizer_files import TokenizerError  # noqa: PLC0415

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if not args.debug:
        from kvant_runtime.gate import bad_requests_log  # noqa: PLC0415

        bad_requests_log.install()
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
        relay=None
        if args.relay is None
        else RelayConfig(args.relay, (upstream_host(args.upstream), args.relay[1])),
        limits_configmap=_limits_configmap(args.limits_configmap),
        tokenizer=args.tokenizer,
        trust_remote_code=args.trust_remote_code,
        drain_seconds=SHUTDOWN_GRACE_SECONDS if args.drain_seconds is None else args.drain_seconds,
    )
    try:
        asyncio.run(serve_until_signalled(config))
    except (LimitsError, TokenizerError, OSError) as err:
        if args.debug:
            raise
        logging.getLogger("kvant.gate").error("event=gate_not_started error=%s", err)
        return 2 if isinstance(err, LimitsError | TokenizerError) else 1
    return 0


def _limits_configmap(ref: tuple[str, str] | None) -> LimitsConfigMap | None:
    """The ConfigMap to follow, or None (the file only) without one or without API access in the pod."""
    if ref is None:
        return None
    from kvant_runtime.gate.limits_watch import ApiAccessError, ApiServer, LimitsConfigMap  # noqa: PLC0415

    try:
        api = ApiServer.in_cluster()
    except ApiAccessError as err:
        logging.getLogger("kvant.gate").error("event=limits_api_disabled following=file error=%s", err)
        return None
    return LimitsConfigMap(api, *ref)
