"""`kvant status [NAME] [-n NS] [--json] [--watch SECONDS]`: one screen for the engineer on call.

It reads the QuantizedModel(s), then each ready engine pod's merged metrics (the gate's and the
engine's, on the pod's metrics port), and, when the model names a Prometheus
(spec.protection.metrics.prometheusURL) or `--prometheus` does, the last 15 minutes of KV usage and
the retractions of the last 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_contracts.sglang_metrics import NUM_RETRACTED_REQUESTS_TOTAL, TOKEN_USAGE, promql_per_pod

_TIMEOUT = 5.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status", help="on-call view of QuantizedModels: phase, conditions, limits and every replica's load"
    )
    parser.add_argument("name", nargs="?", help="one model (default: every model in the namespace)")
    parser.add_argument("-n", "--namespace", default="default", help="the namespace (default: default)")
    parser.add_argument("--prometheus", metavar="URL", help="Prometheus to read history from")
    parser.add_argument("--json", action="store_true", help="one JSON object per model")
    parser.add_argument(
        "--watch", type=float, metavar="SECONDS", help="redraw every SECONDS until interrupted"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - the registrar stays light

    if args.watch is not None and not 1.0 <= args.watch <= 3600.0:
        print("kvant status: --watch takes 1 to 3600 seconds", file=sys.stderr)
        return 2
    try:
        while True:
            text = _once(args)
            if args.watch is None:
                print(text)
                return 0
            print("\033[2J\033[H" + text, flush=True)
            time.sleep(args.watch)
    except ApiException as err:
        print(f"kvant status: the API server refused: {err.status} {err.reason}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _once(args: argparse.Namespace) -> str:
    from kvant_operator.api.resource import GROUP, PLURAL, VERSION  # noqa: PLC0415
    from kvant_operator.kube import Kube, api_client  # noqa: PLC0415
    from kvant_operator.oncall.status_text import render_text  # noqa: PLC0415
    from kvant_operator.oncall.status_view import model_status  # noqa: PLC0415

    kube = Kube(api_client())
    if args.name:
        models = [kube.custom.get_namespaced_custom_object(GROUP, VERSION, args.namespace, PLURAL, args.name)]
    else:
        listed = kube.custom.list_namespaced_custom_object(GROUP, VERSION, args.namespace, PLURAL)
        models = sorted(listed["items"], key=lambda m: m["metadata"]["name"])
    views = []
    for qm in models:
        view = model_status(qm)
        metrics = ((qm.get("spec") or {}).get("protection") or {}).get("metrics") or {}
        prometheus = args.prometheus or metrics.get("prometheusURL")
        _add_replicas(kube, view, prometheus)
        views.append(view)
    if args.json:
        return "\n".join(json.dumps(v.to_json()) for v in views)
    return "\n\n".join(render_text(v) for v in views) if views else f"no QuantizedModel in {args.namespace}"


def _add_replicas(kube: Any, view: Any, prometheus: str | None) -> None:
    from kvant_contracts.serving_pod import METRICS_PORT  # noqa: PLC0415
    from kvant_operator.oncall.status_view import Replica, replica_from_metrics  # noqa: PLC0415
    from kvant_operator.render.roles import engine_selector  # noqa: PLC0415

    pods = kube.list("v1", "Pod", view.namespace, engine_selector(view.name))
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name, ip = pod["metadata"]["name"], (pod.get("status") or {}).get("podIP")
        if not ip:
            continue
        try:
            with urllib.request.urlopen(f"http://{ip}:{METRICS_PORT}/metrics", timeout=_TIMEOUT) as response:
                view.replicas.append(replica_from_metrics(name, response.read().decode()))
        except (urllib.error.URLError, OSError) as err:
            view.replicas.append(Replica(pod=name, error=f"metrics unreachable: {err}"))
    if prometheus:
        _add_history(view, prometheus)


def _add_history(view: Any, url: str) -> None:
    selector = f'{{namespace="{view.namespace}",pod=~"{view.name}-.*"}}'
    retractions = f"{NUM_RETRACTED_REQUESTS_TOTAL}{selector}"
    now = time.time()
    try:
        series = _prometheus(
            url,
            "query_range",
            {
                "query": f"max({TOKEN_USAGE}{selector})",
                "start": now - 900,
                "end": now,
                "step": 30,
            },
        )
        if series:
            view.usage_history = [float(v) for _, v in series[0]["values"]]
        retracted = {
            r["metric"].get("pod"): float(r["value"][1])
            for r in _prometheus(
                url,
                "query",
                {"query": promql_per_pod(NUM_RETRACTED_REQUESTS_TOTAL, f"increase({retractions}[5m])")},
            )
        }
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return  # no history: the live numbers above still stand
    for replica in view.replicas:
        if replica.pod in retracted:
            replica.retracted = retracted[replica.pod]
    view.retractions_window = "in the last 5 minutes (Prometheus)"


def _prometheus(url: str, endpoint: str, params: Obj) -> list[Obj]:
    full = f"{url.rstrip('/')}/api/v1/{endpoint}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(full, timeout=_TIMEOUT) as response:
        body = json.load(response)
    result: list[Obj] = body["data"]["result"]
    return result
