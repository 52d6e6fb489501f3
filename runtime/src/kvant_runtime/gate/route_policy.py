"""The gate's route policy: what each SGLang HTTP route is, so the gate knows what to do with it.

- `GENERATE`: the route makes the engine hold KV cache; it goes through admission, costed by
  `kvant_runtime.request_cost`.
- `READ`: health, model and server information, the models list, metrics; passed through.
- `TOOL`: stateless helpers that hold no KV cache (tokenize, parse a function call); passed through.
- `ADMIN`: everything that changes the engine or reads what is not the caller's (weights, caches,
  sessions, profiling, logging, stored responses). Refused with 403: the gate is the only way in,
  and no client of a model's Service may reconfigure its engine.

Anything not in the table is refused too (404), so a route a newer SGLang adds is closed until it is
classified here. `test_gate_route_policy_covers_sglang` reads SGLang's own HTTP server source and
fails on any route this table does not name.
"""

from __future__ import annotations

import re
from enum import StrEnum


class RouteClass(StrEnum):
    GENERATE = "generate"
    READ = "read"
    TOOL = "tool"
    ADMIN = "admin"


_ANY = ("GET", "POST", "PUT", "DELETE", "HEAD", "PATCH")
_TABLE: dict[RouteClass, tuple[tuple[tuple[str, ...], str], ...]] = {
    RouteClass.GENERATE: (
        (("POST", "PUT"), "/generate"),
        (("POST",), "/v1/completions"),
        (("POST",), "/v1/chat/completions"),
        (("POST",), "/v1/responses"),
        (("POST",), "/v1/embeddings"),
        (("POST", "PUT"), "/encode"),
        (("POST", "PUT"), "/classify"),
        (("POST",), "/v1/classify"),
        (("POST", "PUT"), "/v1/rerank"),
        (("POST",), "/v1/score"),
        (("POST",), "/v1/decisions"),
        (("POST",), "/v1/messages"),
        (("POST",), "/v1/systemone"),
        (("POST",), "/v1/audio/transcriptions"),
        (("POST",), "/invocations"),
        (("POST",), "/vertex_generate"),
        (("POST",), "/api/chat"),
        (("POST",), "/api/generate"),
        (("GET",), "/health_generate"),  # runs a one-token generation in the engine
    ),
    RouteClass.READ: (
        (("GET", "HEAD"), "/"),
        (("GET",), "/ready"),
        (("GET",), "/health"),
        (("GET",), "/ping"),
        (("GET",), "/metrics"),
        (("GET",), "/get_model_info"),
        (("GET",), "/model_info"),
        (("GET",), "/get_server_info"),
        (("GET",), "/server_info"),
        (("GET",), "/v1/models"),
        (("GET",), "/v1/models/{model:path}"),
        (("GET",), "/v1/loads"),
        (("GET",), "/api/tags"),
    ),
    RouteClass.TOOL: (
        (("POST",), "/tokenize"),
        (("POST",), "/v1/tokenize"),
        (("POST",), "/detokenize"),
        (("POST",), "/v1/detokenize"),
        (("POST",), "/v1/messages/count_tokens"),
        (("POST",), "/parse_function_call"),
        (("POST",), "/separate_reasoning"),
        (("POST",), "/api/show"),
    ),
    RouteClass.ADMIN: tuple(
        (_ANY, path)
        for path in (
            "/set_internal_state",
            "/dumper/{method}",
            "/flush_cache",
            "/add_external_corpus",
            "/remove_external_corpus",
            "/list_external_corpora",
            "/hicache/storage-backend/clear",
            "/hicache/storage-backend",
            "/get_hicache_l3_cache_layout",
            "/start_profile",
            "/stop_profile",
            "/set_trace_level",
            "/freeze_gc",
            "/start_expert_distribution_record",
            "/stop_expert_distribution_record",
            "/dump_expert_distribution_record",
            "/update_weights_from_disk",
            "/init_weights_send_group_for_remote_instance",
            "/send_weights_to_remote_instance",
            "/get_remote_instance_transfer_engine_info",
            "/remote_instance_transfer_engine_info",
            "/init_weights_update_group",
            "/destroy_weights_update_group",
            "/update_weights_from_tensor",
            "/begin_weight_update",
            "/end_weight_update",
            "/update_weights_from_distributed",
            "/update_weights_from_ipc",
            "/update_weight_version",
            "/get_weights_by_name",
            "/release_memory_occupation",
            "/resume_memory_occupation",
            "/weights_checker",
            "/slow_down",
            "/pd_role_switch",
            "/load_lora_adapter",
            "/load_lora_adapter_from_tensors",
            "/unload_lora_adapter",
            "/open_session",
            "/close_session",
            "/configure_logging",
            "/abort_request",
            "/pause_generation",
            "/continue_generation",
            "/v1/responses/{response_id}",  # another client's stored response
            "/v1/responses/{response_id}/cancel",
            "/scale_elastic_ep",
            "/is_scaling_elastic_ep",
        )
    ),
}


def _pattern(path: str) -> re.Pattern[str]:
    """FastAPI's path syntax as a regex: `{name}` is one segment, `{name:path}` the rest."""
    regex = re.sub(r"\{[a-z_]+:path\}", ".+", re.escape(path).replace(r"\{", "{").replace(r"\}", "}"))
    return re.compile("^" + re.sub(r"\{[a-z_]+\}", "[^/]+", regex) + "$")


_ROUTES = [
    (route_class, frozenset(methods), path, _pattern(path))
    for route_class, entries in _TABLE.items()
    for methods, path in entries
]


def classify(method: str, path: str) -> RouteClass | None:
    """The class of `method path`, or None for a route SGLang does not serve (or not this way)."""
    for route_class, methods, _, pattern in _ROUTES:
        if method in methods and pattern.match(path):
            return route_class
    return None


def classified_routes() -> dict[str, RouteClass]:
    """Every path template the table names, with its class (for the coverage test)."""
    return {path: route_class for route_class, _, path, _ in _ROUTES}
