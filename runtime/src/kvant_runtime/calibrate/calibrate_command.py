"""`kvant calibrate`: the command line the operator's calibration Job runs too."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE, FP8_KV_DTYPE_NAMES
from kvant_runtime.job_output import emit_result, fail, say

_DESCRIPTION = """\
Calibrate per-layer FP8 KV-cache scales (for the e4m3 or e5m2 cache SGLang will serve) for a Kvant
artifact and write them into it under the tensor names SGLang's loader reads, with a static
per-tensor kv_cache_scheme in config.json. The model runs one decoder layer at a time (memory: one
layer plus activations). The artifact is unpublished
(no kvant-manifest.json) until calibration succeeds, then published under a new digest; rerun after
a failure. The result is printed as one JSON line, last on stdout. Exit codes: 0 ok, 2 bad input,
3 internal error.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="calibrate FP8 KV-cache scales into an artifact", description=_DESCRIPTION
    )
    parser.add_argument("artifact", type=Path, metavar="ARTIFACT_DIR")
    parser.add_argument("--samples", type=int, default=512, help="at most this many samples (default 512)")
    parser.add_argument("--sequence-length", type=int, default=2048, help="tokens per sample (default 2048)")
    parser.add_argument(
        "--data",
        type=Path,
        metavar="PATH",
        help="calibration text: a UTF-8 file or a folder of *.txt files (default: the built-in set)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--kv-dtype",
        default=DEFAULT_KV_DTYPE.value,
        help=f"the KV cache format SGLang serves (--kv-cache-dtype): {' or '.join(FP8_KV_DTYPE_NAMES)}; its "
        f"range sets the scales (default {DEFAULT_KV_DTYPE})",
    )
    parser.add_argument(
        "--tp",
        type=int,
        default=1,
        metavar="N",
        help="SGLang's tensor-parallel size for serving: the --quantization-param-path JSON holds one "
        "scale map per rank, and SGLang ignores a file made for another size (default 1)",
    )
    parser.add_argument("--result", type=Path, metavar="FILE", help="also write the JSON result to FILE")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from kvant_runtime.calibrate.calibrator import Options, calibrate  # noqa: PLC0415 - registrar stays light
    from kvant_runtime.checkpoint.errors import CheckpointError  # noqa: PLC0415

    options = Options(args.samples, args.sequence_length, args.data, args.device, args.tp, args.kv_dtype)
    try:
        result = calibrate(args.artifact, options, lambda message: say("calibrate", message))
    except CheckpointError as err:
        return fail("calibrate", _with_state(str(err), args.artifact), err, args.debug, True)
    except KeyboardInterrupt:
        return fail("calibrate", _with_state("interrupted", args.artifact), None, args.debug, True)
    except Exception as err:  # an unexpected failure: still one line unless --debug
        message = _with_state(f"internal error: {type(err).__name__}: {err}", args.artifact)
        return fail("calibrate", message, err, args.debug, False)
    emit_result(result, args.result)
    return 0


def _with_state(message: str, artifact: Path) -> str:
    from kvant_runtime.calibrate.scales_publish import left_unpublished  # noqa: PLC0415

    if left_unpublished(artifact):
        return f"{message}; {artifact} stays unpublished until `kvant calibrate` succeeds (rerun it)"
    return message
