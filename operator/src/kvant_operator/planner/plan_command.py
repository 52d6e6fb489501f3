"""`kvant plan`: the capacity plan of a checkpoint, as a comparison table or as JSON, and as a PNG."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE, KvCacheDtype
from kvant_contracts.launch_spec import Device
from kvant_contracts.lora import DEFAULT_SLOTS, DEFAULT_TARGETS, LORA_TARGET_NAMES, LoraEnvelope, LoraTarget
from kvant_contracts.weights_recipe import DEFAULT_GROUP_SIZE, DENSE_DEFAULT_TARGETS, MOE_DEFAULT_TARGETS
from kvant_operator.api.spec import QuantTargets, WeightFormat
from kvant_operator.planner.architecture import ConfigError
from kvant_operator.planner.capacity_plan import DEFAULT_CONTEXTS, PlanRequest, compare, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.inventory import InventoryError
from kvant_operator.planner.plan_plot import PlotError, capacity_panels, check_can_plot, write_plot
from kvant_operator.planner.table import render_table


def _bounded(kind: type[int] | type[float], low: float, high: float, *, open_low: bool = False) -> Any:
    """An argparse type: a finite number of `kind` in [low, high] (or (low, high]); argparse turns
    the error into `kvant plan: error: argument --flag: ...` and exit 2."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}"
            ) from None
        if not math.isfinite(value) or value > high or value < low or (open_low and value == low):
            bracket = "(" if open_low else "["
            raise argparse.ArgumentTypeError(f"{text} is out of range {bracket}{low:g}, {high:g}]")
        return value

    return parse


POSITIVE_INT = _bounded(int, 1, 4096)
CONTEXT = _bounded(int, 1, 2**31)
POSITIVE_MIB = _bounded(int, 1, 4 << 20)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="capacity plan: weights, KV tokens and concurrency per replica",
        description="Plan weights per GPU, KV cache tokens and concurrency from a config.json or a "
        "checkpoint folder (safetensors headers only; no tensor data is read).",
    )
    parser.add_argument("--config", type=Path, required=True, help="config.json or checkpoint folder")
    parser.add_argument(
        "--tp", type=POSITIVE_INT, default=1, help="tensor-parallel size (spec.serving.tensorParallel)"
    )
    parser.add_argument(
        "--gpus", type=POSITIVE_INT, help="GPUs per replica (spec.serving.gpu.count); default: --tp"
    )
    parser.add_argument(
        "--gpu-memory-gib",
        type=_bounded(float, 0, 1e6, open_low=True),
        required=True,
        help="memory of one GPU (spec.serving.gpu.memoryGiB); with --device cpu, of the engine container "
        "(spec.serving.cpu.memoryGiB)",
    )
    parser.add_argument(
        "--device",
        choices=[d.value for d in Device],
        default=Device.CUDA.value,
        help="where the engine computes (spec.serving.device)",
    )
    parser.add_argument(
        "--kv-cache-mib",
        type=POSITIVE_MIB,
        help="with --device cpu: the KV cache size (spec.serving.cpu.kvCacheMiB); default: all memory leaves",
    )
    parser.add_argument(
        "--kv-dtype",
        choices=[d.value for d in KvCacheDtype],
        default=DEFAULT_KV_DTYPE.value,
        help="KV cache dtype (spec.kvCache.dtype)",
    )
    parser.add_argument(
        "--weights",
        choices=[f.value for f in WeightFormat],
        help="served weight format (spec.weights.format); default: the source's",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        choices=[32, 64, 128],
        help=f"INT4 group size (default {DEFAULT_GROUP_SIZE})",
    )
    parser.add_argument(
        "--targets",
        choices=[t.value for t in QuantTargets],
        help=f"layers to quantize; default: {MOE_DEFAULT_TARGETS} for MoE, {DENSE_DEFAULT_TARGETS} for dense",
    )
    parser.add_argument(
        "--ignore", action="append", default=[], help="module kept in higher precision (repeat)"
    )
    parser.add_argument(
        "--mem-fraction-static",
        type=_bounded(float, 0, 1, open_low=True),
        help="default: SGLang's for this GPU",
    )
    parser.add_argument("--page-size", type=POSITIVE_INT, default=1, help="KV page size in tokens")
    parser.add_argument(
        "--context",
        type=CONTEXT,
        action="append",
        help=f"context length for max concurrency (repeat); default: {', '.join(map(str, DEFAULT_CONTEXTS))}",
    )
    lora = parser.add_argument_group("an adapter pool, as SGLang's flags size it (spec.serving.lora)")
    lora.add_argument("--max-lora-rank", type=_bounded(int, 1, 512), help="plan an adapter pool of this rank")
    lora.add_argument(
        "--lora-target-modules", nargs="+", choices=LORA_TARGET_NAMES, help="default: every projection"
    )
    lora.add_argument("--max-loras-per-batch", type=_bounded(int, 1, 64), default=DEFAULT_SLOTS, help="slots")
    parser.add_argument("--json", action="store_true", help="print the requested plan as one JSON object")
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw BF16 vs FP8 KV (tokens, concurrency) and source vs INT4 weights as a PNG "
        "(needs the 'plot' extra: pip install 'kvant-operator[plot]')",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    gpus = args.gpus or args.tp
    if args.tp < 1 or gpus % args.tp:
        print(f"kvant plan: --gpus {gpus} must be a positive multiple of --tp {args.tp}", file=sys.stderr)
        return 2
    device = Device(args.device)
    if device is Device.CPU and (args.tp != 1 or args.gpus):
        print("kvant plan: --device cpu plans one engine process: --tp 1 and no --gpus", file=sys.stderr)
        return 2
    if args.kv_cache_mib and device is not Device.CPU:
        print("kvant plan: --kv-cache-mib applies with --device cpu only", file=sys.stderr)
        return 2
    request = PlanRequest(
        device=device,
        kv_cache_mib=args.kv_cache_mib,
        gpu_memory_gib=args.gpu_memory_gib,
        tensor_parallel=args.tp,
        gpus=gpus,
        kv_cache_dtype=KvCacheDtype(args.kv_dtype),
        weights_format=WeightFormat(args.weights) if args.weights else None,
        group_size=args.group_size,
        targets=QuantTargets(args.targets) if args.targets else None,
        ignore=tuple(args.ignore),
        mem_fraction_static=args.mem_fraction_static,
        page_size=args.page_size,
        contexts=tuple(args.context or DEFAULT_CONTEXTS),
        lora=_lora(args),
    )
    try:
        if args.plot:  # before any work: a missing matplotlib or folder is known now
            check_can_plot(args.plot)
        checkpoint = load_checkpoint(args.config)
    except (ConfigError, InventoryError, PlotError) as err:
        print(f"kvant plan: {err}", file=sys.stderr)
        return 2
    shape = checkpoint.shape
    title = (
        f"{shape.architecture} ({shape.attention.value.upper()}, {shape.num_layers} layers) · TP{args.tp} · "
        f"{_hardware(device, gpus, args.gpu_memory_gib)} · tensors from {checkpoint.inventory.origin}"
    )
    if args.json:
        print(json.dumps(make_plan(checkpoint, request).model_dump(mode="json"), indent=2))
    else:
        print(render_table(compare(checkpoint, request), title))
    if args.plot:
        try:
            write_plot(capacity_panels(checkpoint, request), args.plot, title)
        except PlotError as err:
            print(f"kvant plan: {err}", file=sys.stderr)
            return 2
        # stderr, so that --json keeps stdout one JSON object
        print(f"kvant plan: wrote {args.plot}", file=sys.stderr)
    return 0


def _lora(args: argparse.Namespace) -> LoraEnvelope | None:
    if args.max_lora_rank is None:
        return None
    named = args.lora_target_modules
    targets = tuple(LoraTarget(name) for name in named) if named else DEFAULT_TARGETS
    return LoraEnvelope(max_rank=args.max_lora_rank, targets=targets, slots=args.max_loras_per_batch)


def _hardware(device: Device, gpus: int, memory_gib: float) -> str:
    return f"CPU, {memory_gib:g} GiB" if device is Device.CPU else f"{gpus} x {memory_gib:g} GiB"
