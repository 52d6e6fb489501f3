"""`kvant eval`: the command line the operator's validation Job runs too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kvant_contracts.kv_dtypes import FP8_KV_DTYPE_NAMES, KvCacheDtype
from kvant_runtime.job_output import EXIT_GATE_FAILED, emit_result, fail, say

_DESCRIPTION = """\
Compare a candidate model folder (INT4, optionally with a simulated FP8 KV cache) against its
reference on a built-in evaluation text, one decoder layer at a time. Reports the mean and p99 KL
divergence of the next-token distributions, top-1 agreement and perplexity. With
--max-kl-divergence the mean KL divergence gates the candidate. The result is printed as one JSON
line, last on stdout. Exit codes: 0 ok (passed), 1 the gate failed, 2 bad input, 3 internal error.
"""
_HUMAN_METRICS = (
    ("meanKLDivergence", "mean KL divergence"),
    ("p99KLDivergence", "p99 KL divergence"),
    ("top1Agreement", "top-1 agreement"),
    ("perplexity", "perplexity (candidate)"),
    ("referencePerplexity", "perplexity (reference)"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="accuracy gate: a candidate's next-token distributions against a reference",
        description=_DESCRIPTION,
    )
    parser.add_argument("reference", type=Path, metavar="REFERENCE_DIR")
    parser.add_argument("candidate", type=Path, metavar="CANDIDATE_DIR")
    parser.add_argument(
        "--kv-dtype",
        default=KvCacheDtype.AUTO.value,
        help=f"candidate KV cache: {KvCacheDtype.AUTO} or {KvCacheDtype.BF16} (unquantized), or "
        f"{' / '.join(FP8_KV_DTYPE_NAMES)} (simulated)",
    )
    parser.add_argument(
        "--unit-scales",
        action="store_true",
        help="with an FP8 --kv-dtype: use scale 1.0 instead of the candidate's k/v_scale",
    )
    parser.add_argument(
        "--max-kl-divergence",
        type=float,
        metavar="X",
        help="fail when the mean KL divergence exceeds X (spec.evaluation.maxKLDivergence)",
    )
    parser.add_argument("--samples", type=int, default=16, help="at most this many samples (default 16)")
    parser.add_argument("--sequence-length", type=int, default=512, help="tokens per sample (default 512)")
    parser.add_argument(
        "--data", type=Path, metavar="PATH", help="evaluation text: a UTF-8 file or a folder of *.txt files"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    parser.add_argument("--result", type=Path, metavar="FILE", help="also write the JSON result to FILE")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from kvant_runtime.checkpoint.errors import CheckpointError  # noqa: PLC0415 - registrar stays light
    from kvant_runtime.evaluate.evaluator import Options, evaluate  # noqa: PLC0415

    options = Options(
        kv_dtype=args.kv_dtype,
        unit_scales=args.unit_scales,
        max_kl_divergence=args.max_kl_divergence,
        samples=args.samples,
        sequence_length=args.sequence_length,
        data=args.data,
        device=args.device,
    )
    try:
        result = evaluate(args.reference, args.candidate, options, lambda message: say("eval", message))
    except CheckpointError as err:
        return fail("eval", str(err), err, args.debug, True)
    except KeyboardInterrupt:
        return fail("eval", "interrupted", None, args.debug, True)
    except Exception as err:  # an unexpected failure: still one line unless --debug
        return fail("eval", f"internal error: {type(err).__name__}: {err}", err, args.debug, False)
    if not args.json:
        _print_human(result)
    emit_result(result, args.result)
    if result["failure"] is not None:
        sys.stderr.write(f"kvant eval: gate failed: {result['failure']}\n")
        return EXIT_GATE_FAILED
    return 0


def _print_human(result: dict[str, Any]) -> None:
    for key, label in _HUMAN_METRICS:
        print(f"{label:>24}: {result[key]:.6g}")
    verdict = "no gate" if result["maxKLDivergence"] is None else ("passed" if result["passed"] else "FAILED")
    print(f"{'gate':>24}: {verdict}")
