"""`kvant tiny-model` and `kvant tiny-chat-model`: the test fixtures' checkpoints, for tests, the
benches and the demo. They live in the development package, not the runtime: no image ships them."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from kvant_dev.tinymodel_options import ARCHES, DTYPES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_tiny_model(subparsers)
    _register_tiny_chat_model(subparsers)


def _register_tiny_model(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tiny-model",
        help="write a tiny random-weight checkpoint (Llama GQA or DeepSeek-V3 MLA+MoE) for tests and demos",
    )
    parser.add_argument("output", type=Path, metavar="OUTPUT_DIR")
    parser.add_argument("--arch", choices=ARCHES, default="llama")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(run=_run_tiny_model)


def _run_tiny_model(args: argparse.Namespace) -> int:
    from kvant_dev.tinymodel import make_tiny_checkpoint  # noqa: PLC0415 - torch only when run

    path = make_tiny_checkpoint(
        args.output, arch=args.arch, dtype=args.dtype, shards=args.shards, seed=args.seed
    )
    print(f"wrote {args.arch} ({args.dtype}) checkpoint to {path}")
    return 0


def _register_tiny_chat_model(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tiny-chat-model",
        help="write the tiny trained chat model (its own BPE tokenizer and chat template) that the real "
        "SGLang engine serves in the local cluster; trained once (minutes), then copied from the cache",
    )
    parser.add_argument("output", type=Path, metavar="OUTPUT_DIR")
    parser.set_defaults(run=_run_tiny_chat_model)


def _run_tiny_chat_model(args: argparse.Namespace) -> int:
    from kvant_dev.tinychat import ensure_tiny_chat_model  # noqa: PLC0415 - torch only when run

    built = ensure_tiny_chat_model()
    shutil.copytree(built, args.output, dirs_exist_ok=True)
    print(f"wrote the tiny chat model to {args.output}")
    return 0
