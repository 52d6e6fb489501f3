"""Every HTTP route of the SGLang the runtime image pins is classified by the gate's route policy.

The routes are read from SGLang's own server source (its FastAPI decorators), as the metric-name test
reads its metrics, so a route a new SGLang adds fails here until it is classified.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from kvant_runtime.gate.route_policy import RouteClass, classified_routes, classify

SERVER_MODULES = (
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.entrypoints.v1_loads",
    "sglang.srt.entrypoints.elastic_ep",
)
_VERBS = {"get", "post", "put", "delete", "head", "patch"}


def _path_argument(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # os.environ.get("SGLANG_OLLAMA_CHAT_ROUTE", "/api/chat"): the route unless configured otherwise
    if isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
        return str(node.args[1].value)
    return None


def sglang_routes() -> set[tuple[str, str]]:
    routes: set[tuple[str, str]] = set()
    for name in SERVER_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is not installed"
        for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            verb = node.func.attr
            if verb not in _VERBS | {"api_route"}:
                continue
            path = _path_argument(node.args[0])
            if path is None or not path.startswith("/"):
                continue
            methods = [verb.upper()] if verb in _VERBS else ["GET"]
            for keyword in node.keywords:
                if keyword.arg == "methods" and isinstance(keyword.value, ast.List):
                    methods = [str(ast.literal_eval(m)) for m in keyword.value.elts]
            routes.update((method, path) for method in methods)
    return routes


def _concrete(path: str) -> str:
    return (
        path.replace("{model:path}", "org/model").replace("{response_id}", "resp_1").replace("{method}", "m")
    )


def test_sglang_serves_the_routes_this_test_reads() -> None:
    routes = sglang_routes()
    assert ("POST", "/generate") in routes and ("POST", "/v1/chat/completions") in routes
    assert len(routes) > 80  # the parser found SGLang's route table, not a fragment of it


@pytest.mark.parametrize(("method", "path"), sorted(sglang_routes()))
def test_every_sglang_route_is_classified(method: str, path: str) -> None:
    assert classify(method, _concrete(path)) is not None, f"{method} {path} is not in the gate's route policy"


def test_the_policy_names_no_route_sglang_lacks() -> None:
    served = {path for _, path in sglang_routes()} | {"/metrics"}  # /metrics is SGLang's middleware
    assert set(classified_routes()) - served == set()


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("PUT", "/generate", RouteClass.GENERATE),
        ("POST", "/invocations", RouteClass.GENERATE),
        ("POST", "/api/chat", RouteClass.GENERATE),
        ("POST", "/v1/messages", RouteClass.GENERATE),
        ("GET", "/v1/models", RouteClass.READ),
        ("POST", "/flush_cache", RouteClass.ADMIN),
        ("POST", "/update_weights_from_disk", RouteClass.ADMIN),
        ("POST", "/abort_request", RouteClass.ADMIN),
        ("GET", "/v1/responses/resp_1", RouteClass.ADMIN),
        ("DELETE", "/generate", None),
        ("GET", "/no/such/route", None),
    ],
)
def test_known_routes_have_the_expected_class(method: str, path: str, expected: RouteClass | None) -> None:
    assert classify(method, path) is expected
