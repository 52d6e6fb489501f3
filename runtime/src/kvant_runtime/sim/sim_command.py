"""`kvant sim`: serve the engine simulator."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from kvant_contracts import engine_scheduler
from kvant_contracts.kv_dtypes import KV_DTYPE_NAMES, KvCacheDtype
from kvant_contracts.lora import DEFAULT_SLOTS, LORA_TARGET_NAMES, LoraEnvelope, LoraTarget
from kvant_runtime.sim.cost import CostModel


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="serve the SGLang-compatible engine simulator (no GPU)",
        description="An SGLang-compatible engine simulator: same HTTP API and metrics, simulated KV cache.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-name", required=True, help="served model name (metrics label model_name)")
    capacity = parser.add_mutually_exclusive_group(required=True)
    capacity.add_argument("--kv-tokens", type=int, help="KV cache capacity in tokens")
    capacity.add_argument(
        "--plan", type=Path, help="`kvant plan --json` output; capacity = kv_tokens_per_replica"
    )
    parser.add_argument(
        "--kv-cache-dtype",
        choices=KV_DTYPE_NAMES,
        help="reported in /get_server_info as SGLang does (default: the plan's, else auto)",
    )
    parser.add_argument("--page-size", type=int, help="KV page size in tokens (default: the plan's, else 1)")
    parser.add_argument("--max-running-requests", type=int, default=256)
    parser.add_argument("--context-length", type=int, default=131072)
    parser.add_argument(
        "--max-prefill-tokens", type=int, default=16384, help="prompt tokens per prefill batch"
    )
    parser.add_argument(
        "--new-token-ratio",
        type=float,
        default=0.7,
        help="initial KV reserved per output token a running request still has to come; it decays "
        "and jumps after a retraction as in SGLang (SGLANG_INIT_NEW_TOKEN_RATIO, default 0.7)",
    )
    parser.add_argument(
        "--schedule-conservativeness",
        type=float,
        default=engine_scheduler.CONSERVATIVENESS.default,
        help="SGLang's flag: the initial ratio is --new-token-ratio x this, at most 1. SGLang's "
        + ", ".join(knob.sglang for knob in engine_scheduler.ENV_KNOBS)
        + " are read from the environment, as SGLang reads them",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--disaggregation-mode",
        choices=["null", "prefill", "decode"],
        default="null",
        help="prefill/decode role, as SGLang's flag; requests then carry the router's bootstrap fields "
        "(see kvant_runtime.sim.pd_handoff, a stand-in for SGLang's KV transfer)",
    )
    parser.add_argument(
        "--disaggregation-bootstrap-port",
        type=int,
        default=8998,
        help="a prefill's bootstrap server port, on --host (SGLang's default: 8998)",
    )
    parser.add_argument(
        "--output-lengths",
        metavar="SPEC",
        help="natural answer lengths before max_new_tokens: lognormal:MEDIAN,SIGMA or file:PATH "
        "(default: every request runs to its limit); see kvant_runtime.sim.output_lengths",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        metavar="DIR",
        help="count prompt tokens with the model's tokenizer and chat template in DIR (the served "
        "folder), as SGLang does; default: the bytes estimate",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --tokenizer load the folder's own tokenizer code, as SGLang's flag of this name does",
    )
    parser.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="tokens per streamed chunk after the first, as SGLang's flag (default 1)",
    )
    lora = parser.add_argument_group("LoRA adapters, SGLang's flags (see kvant_runtime.sim.adapters)")
    lora.add_argument("--enable-lora", action="store_true", help="serve adapters loaded at run time")
    lora.add_argument(
        "--max-lora-rank", type=int, help="the largest adapter rank (needed with --enable-lora)"
    )
    lora.add_argument(
        "--lora-target-modules", nargs="+", choices=LORA_TARGET_NAMES, help="modules adapters may change"
    )
    lora.add_argument("--max-loras-per-batch", type=int, default=DEFAULT_SLOTS, help="adapter slots")
    lora.add_argument("--max-loaded-loras", type=int, help="adapters held at once (default: no bound)")
    cost = parser.add_argument_group("cost model (see kvant_runtime.sim.cost)")
    cost.add_argument(
        "--kv-bytes-per-token", type=int, help="KV bytes per token per GPU (default: the plan's)"
    )
    for flag, default, meaning in _cost_flags():
        cost.add_argument(flag, type=float, default=default, help=f"{meaning} (default %(default)s)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aiohttp import web  # noqa: PLC0415

    from kvant_runtime.prompt_counter import load_counter  # noqa: PLC0415
    from kvant_runtime.sim.adapters import AdapterRegistry  # noqa: PLC0415
    from kvant_runtime.sim.engine import Engine, EngineConfig  # noqa: PLC0415
    from kvant_runtime.sim.output_lengths import OutputLengthsError, parse_output_lengths  # noqa: PLC0415
    from kvant_runtime.sim.plan_file import PlanError, read_plan_capacity  # noqa: PLC0415
    from kvant_runtime.sim.sim_server import ServerInfo, SimServer  # noqa: PLC0415
    from kvant_runtime.tokenizer_files import TokenizerError  # noqa: PLC0415

    kv_tokens, kv_bytes, dtype, page_size = (
        args.kv_tokens,
        args.kv_bytes_per_token,
        KvCacheDtype.AUTO.value,
        1,
    )
    if args.plan is not None:
        try:
            plan = read_plan_capacity(args.plan)
        except PlanError as error:
            print(f"kvant sim: {error}", file=sys.stderr)
            return 2
        kv_tokens, dtype, page_size = plan.kv_tokens, plan.kv_cache_dtype, plan.page_size
        kv_bytes = kv_bytes or plan.kv_bytes_per_token
    dtype, page_size = args.kv_cache_dtype or dtype, args.page_size or page_size
    refusal = _refusal(args, kv_tokens)
    if refusal is not None:
        print(f"kvant sim: {refusal}", file=sys.stderr)
        return 2
    try:
        lengths = parse_output_lengths(args.output_lengths) if args.output_lengths else None
    except OutputLengthsError as error:
        print(f"kvant sim: {error}", file=sys.stderr)
        return 2
    cost = CostModel(
        decode_base_s=args.decode_base_ms / 1e3,
        decode_per_request_s=args.decode_per_request_ms / 1e3,
        kv_bytes_per_token=kv_bytes or CostModel.kv_bytes_per_token,
        kv_read_bytes_per_s=args.kv_read_gbps * 1e9,
        prefill_per_token_s=args.prefill_per_token_us / 1e6,
        prefill_base_s=args.prefill_base_ms / 1e3,
    )
    knobs = _scheduler_knobs(args.schedule_conservativeness)
    if isinstance(knobs, str):
        print(f"kvant sim: {knobs}", file=sys.stderr)
        return 2
    config = EngineConfig(
        kv_tokens=kv_tokens,
        max_running_requests=args.max_running_requests,
        context_length=args.context_length,
        max_prefill_tokens=args.max_prefill_tokens,
        new_token_ratio=min(args.new_token_ratio * knobs["conservativeness"], 1.0),
        min_new_token_ratio_factor=knobs["minNewTokenRatioFactor"],
        new_token_ratio_decay_steps=int(knobs["newTokenRatioDecaySteps"]),
        clip_max_new_tokens=int(knobs["clipMaxNewTokensEstimation"]),
        seed=args.seed,
        cost=cost,
        output_lengths=lengths,
        adapter_slots=args.max_loras_per_batch if args.enable_lora else None,
    )
    bootstrap = (
        (args.host, args.disaggregation_bootstrap_port) if args.disaggregation_mode == "prefill" else None
    )
    info = ServerInfo(
        args.model_name, dtype, page_size, args.disaggregation_mode, bootstrap, args.stream_interval
    )
    try:
        counter = load_counter(args.tokenizer, trust_remote_code=args.trust_remote_code)
    except TokenizerError as error:
        print(f"kvant sim: {error}", file=sys.stderr)
        return 2
    server = SimServer(Engine(config), info, counter, AdapterRegistry(_lora_envelope(args)))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("kvant.sim").info(
        "event=sim.start host=%s port=%d model=%s kv_tokens=%d max_running_requests=%d kv_bytes_per_token=%d",
        args.host,
        args.port,
        args.model_name,
        kv_tokens,
        args.max_running_requests,
        cost.kv_bytes_per_token,
    )
    web.run_app(server.app(), host=args.host, port=args.port, print=None, access_log=None)
    return 0


# The cost model's times, in each flag's unit: the flag, its default (CostModel's own, the GPU
# profile), what it sets.
def _cost_flags() -> tuple[tuple[str, float, str], ...]:
    gpu = CostModel()
    return (
        ("--decode-base-ms", gpu.decode_base_s * 1e3, "decode step time at batch 1, no context"),
        ("--decode-per-request-ms", gpu.decode_per_request_s * 1e3, "added per request in the batch"),
        ("--kv-read-gbps", gpu.kv_read_bytes_per_s / 1e9, "effective KV read bandwidth, GB/s"),
        ("--prefill-per-token-us", gpu.prefill_per_token_s * 1e6, "prefill time per prompt token"),
        ("--prefill-base-ms", gpu.prefill_base_s * 1e3, "fixed time of a prefill step"),
    )


def _refusal(args: argparse.Namespace, kv_tokens: int) -> str | None:
    """The first flag whose value the simulator cannot run with, named, or None."""
    counts = (
        ("--kv-tokens", kv_tokens),
        ("--max-running-requests", args.max_running_requests),
        ("--stream-interval", args.stream_interval),
        ("--max-lora-rank", args.max_lora_rank),  # the LoRA flags: None when not given
        ("--max-loras-per-batch", args.max_loras_per_batch),
        ("--max-loaded-loras", args.max_loaded_loras),
    )
    for flag, value in counts:
        if value is not None and value <= 0:
            return f"{flag} must be a positive integer, got {value}"
    lora = _lora_refusal(args)
    if lora is not None:
        return lora
    for flag, _, _ in _cost_flags():
        amount = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if flag == "--kv-read-gbps" and not amount > 0:  # a divisor
            return f"{flag} must be a positive number, got {amount}"
        if not amount >= 0:  # NaN too
            return f"{flag} must be a non-negative number, got {amount}"
    return None


def _lora_refusal(args: argparse.Namespace) -> str | None:
    if args.enable_lora and (args.max_lora_rank is None or not args.lora_target_modules):
        # SGLang's own refusal when it starts with no --lora-paths to infer them from.
        return (
            "with --enable-lora and no initial adapters, set both --max-lora-rank and --lora-target-modules"
        )
    if args.max_loaded_loras is not None and args.max_loaded_loras < args.max_loras_per_batch:
        return f"--max-loaded-loras {args.max_loaded_loras} must be at least --max-loras-per-batch"
    return None


def _lora_envelope(args: argparse.Namespace) -> LoraEnvelope | None:
    if not args.enable_lora:
        return None
    return LoraEnvelope(
        max_rank=args.max_lora_rank,
        targets=tuple(LoraTarget(name) for name in args.lora_target_modules),
        slots=args.max_loras_per_batch,
        max_loaded=args.max_loaded_loras,
    )


def _scheduler_knobs(conservativeness: float) -> dict[str, float] | str:
    """SGLang's admission knobs as SGLang would read them: the flag, the environment, else its
    defaults (kvant_contracts.engine_scheduler); or why one is invalid."""
    knobs = {knob.field: knob.default for knob in engine_scheduler.KNOBS}
    knobs[engine_scheduler.CONSERVATIVENESS.field] = conservativeness
    for knob in engine_scheduler.ENV_KNOBS:
        text = os.environ.get(knob.sglang)
        if text is None:
            continue
        try:
            knobs[knob.field] = int(text) if knob.integer else float(text)
        except ValueError:
            return f"{knob.sglang} must be a number, got {text!r}"
    for name, value in knobs.items():
        problem = engine_scheduler.problem(name, value)
        if problem is not None:
            return problem
    return knobs
