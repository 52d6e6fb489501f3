"""`kvant convert`: the command line the operator's conversion Job runs too."""

from __future__ import annotations

import argparse
import errno
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kvant_contracts.weights_recipe import (
    DEFAULT_GROUP_SIZE,
    DENSE_DEFAULT_TARGETS,
    GPTQ_ACT_ORDER,
    GPTQ_DAMPENING,
    GPTQ_SAMPLES,
    GPTQ_SEQUENCE_LENGTH,
    MOE_DEFAULT_TARGETS,
    default_targets,
)
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.job_progress import Progress

if TYPE_CHECKING:
    from kvant_runtime.convert.recipe import Recipe

_DESCRIPTION = """\
Convert a safetensors checkpoint (bf16/fp16/fp32 or FP8-block) to compressed-tensors INT4
(pack-quantized W4A16), streaming shard by shard. Output is staged under OUTPUT_DIR/.kvant-partial
and published by writing OUTPUT_DIR/kvant-manifest.json last; rerunning resumes finished shards.
--method gptq rounds with GPTQ (calibrated on text, one decoder layer at a time, resumable per layer)
instead of round-to-nearest; the artifact has the same format either way.
"""
_GPTQ_FLAGS = ("samples", "sequence_length", "damp", "act_order", "data", "min_expert_tokens", "device")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a checkpoint to INT4 (streaming, resumable, distributable)",
        description=_DESCRIPTION,
    )
    parser.add_argument("source", type=Path, metavar="SOURCE_DIR")
    parser.add_argument("output", type=Path, metavar="OUTPUT_DIR")
    parser.add_argument("--format", default="int4", help="target weight format (only int4)")
    parser.add_argument(
        "--group-size", type=int, default=DEFAULT_GROUP_SIZE, help="INT4 group size: 32, 64 or 128"
    )
    parser.add_argument(
        "--targets",
        help=f"all-linear, or experts (MoE routed experts only); default: {MOE_DEFAULT_TARGETS} for a source "
        f"with routed experts, else {DENSE_DEFAULT_TARGETS} (as the planner and the operator decide)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATTERN",
        help="keep matching modules unquantized: a module name (or dotted tail), or re:REGEX; repeatable",
    )
    _add_gptq_arguments(parser)
    parser.add_argument("--revision", help="source revision recorded in the manifest (commit or tag)")
    parser.add_argument(
        "--allow-symlinks-into",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="links in SOURCE_DIR may lead into DIR (e.g. a Hugging Face cache's blobs); repeatable",
    )
    parser.add_argument("--worker-index", type=int, default=0, help="this worker's index, 0..workers-1")
    parser.add_argument("--workers", type=int, default=1, help="number of workers sharing the shards")
    parser.add_argument(
        "--finalize",
        action="store_true",
        help="after all workers: check, write index/config/manifest, publish",
    )
    parser.add_argument("--threads", type=int, default=0, help="pipeline threads (default: one per CPU core)")
    parser.add_argument(
        "--progress-json", metavar="PATH", help="also write progress as JSON lines to PATH ('-' for stdout)"
    )
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    parser.set_defaults(run=_run)


def _add_gptq_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method", default="rtn", help="how INT4 codes are chosen: rtn (round to nearest) or gptq"
    )
    gptq = parser.add_argument_group("GPTQ (only with --method gptq)")
    gptq.add_argument("--samples", type=int, help=f"calibration samples (default {GPTQ_SAMPLES})")
    gptq.add_argument(
        "--sequence-length", type=int, help=f"tokens per sample (default {GPTQ_SEQUENCE_LENGTH})"
    )
    gptq.add_argument(
        "--damp", type=float, help=f"dampening, a fraction of mean(diag(H)) (default {GPTQ_DAMPENING})"
    )
    gptq.add_argument(
        "--act-order",
        action=argparse.BooleanOptionalAction,
        help="process columns by decreasing activation energy; groups keep their columns "
        f"(default {'on' if GPTQ_ACT_ORDER else 'off'})",
    )
    gptq.add_argument(
        "--data",
        metavar="PATH",
        help="calibration text: a UTF-8 file or a folder of *.txt (default: built-in)",
    )
    gptq.add_argument(
        "--min-expert-tokens",
        type=int,
        metavar="N",
        help="MoE experts routed fewer tokens keep RTN (default: twice the group size)",
    )
    gptq.add_argument("--device", help="cpu or cuda (default cpu)")
    # For tests: stop after N decoder layers as if killed there; a rerun resumes.


def _recipe(args: argparse.Namespace) -> Recipe:
    from kvant_runtime.convert.recipe import Recipe  # noqa: PLC0415 - the registrar stays import-light
    from kvant_runtime.gptq.gptq_settings import GptqSettings  # noqa: PLC0415

    given = {name: getattr(args, name) for name in _GPTQ_FLAGS if getattr(args, name) is not None}
    if args.method != "gptq":
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise CheckpointError(f"{flags}: GPTQ settings apply only to --method gptq")
        return Recipe(args.format, args.group_size, _targets(args), tuple(args.ignore), args.method)
    settings = GptqSettings(**given)
    return Recipe(args.format, args.group_size, _targets(args), tuple(args.ignore), args.method, settings)


def _targets(args: argparse.Namespace) -> str:
    """The given --targets, or the one default for this source (kvant_contracts.weights_recipe)."""
    if args.targets is not None:
        return str(args.targets)
    from kvant_contracts.int4_artifact import is_routed_expert  # noqa: PLC0415 - registrar stays light
    from kvant_runtime.checkpoint.source import open_source  # noqa: PLC0415

    source = open_source(args.source, tuple(args.allow_symlinks_into))
    return default_targets(any(is_routed_expert(name) for name in source.weight_map))


def _run(args: argparse.Namespace) -> int:
    from kvant_runtime.convert.converter import Job, run  # noqa: PLC0415 - the registrar stays import-light

    try:
        machine = _open_progress(args.progress_json)
    except OSError as err:
        print(f"kvant convert: error: --progress-json {args.progress_json}: {err.strerror}", file=sys.stderr)
        return 2
    progress = Progress(human=sys.stderr, machine=machine)
    try:
        job = Job(
            source_dir=args.source,
            output_dir=args.output,
            recipe=_recipe(args),
            revision=args.revision,
            worker_index=args.worker_index,
            workers=args.workers,
            finalize=args.finalize,
            threads=args.threads,
            allowed_roots=tuple(args.allow_symlinks_into),
        )
        run(job, progress)
        return 0
    except CheckpointError as err:
        return _fail(args, progress, str(err), err)
    except KeyboardInterrupt:
        return _fail(args, progress, "interrupted; rerun the same command to resume", None, code=130)
    except OSError as err:
        message, cause = _os_failure(err, args.output)
        return _fail(args, progress, message, cause)
    except Exception as err:  # an unexpected failure: still one line unless --debug
        return _fail(args, progress, f"internal error: {type(err).__name__}: {err}", err)
    finally:
        if machine not in (None, sys.stdout):
            machine.close()


def _os_failure(err: OSError, output: str) -> tuple[str, OSError | None]:
    """The message for an OSError, and the error to trace with --debug (None: not a bug). A full
    volume is the operator's to fix, not Kvant's: the message says where and what to do."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT):
        return f"internal error: {type(err).__name__}: {err}", err
    try:
        free = f"{shutil.disk_usage(output).free / 2**30:.2f} GiB free on the output volume"
    except OSError:
        free = "the output volume unreadable"
    return (
        f"no space left writing {err.filename or output} ({free}): free space or grow the artifacts "
        "volume; the Job's next pod resumes where this one stopped",
        None,
    )


def _fail(
    args: argparse.Namespace, progress: Progress, message: str, err: BaseException | None, code: int = 1
) -> int:
    progress.error(message)
    if args.debug and err is not None:
        raise err
    hint = (
        " (rerun with --debug for a traceback)"
        if err is not None and not isinstance(err, CheckpointError)
        else ""
    )
    print(f"kvant convert: error: {message}{hint}", file=sys.stderr)
    return code


def _open_progress(target: str | None) -> TextIO | None:
    if target is None:
        return None
    if target == "-":
        return sys.stdout
    return open(target, "a", buffering=1)
