"""`kvant crd`: print, write or check the generated CRD, or its Markdown reference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvant_operator.api.crd import crd_yaml
from kvant_operator.api.reference import reference_markdown

CRD_PATH = "crds/quantizedmodels.kvant.dev.yaml"
REFERENCE_PATH = "docs/crd-reference.md"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "crd",
        help="generate the QuantizedModel CRD (or its reference) from the API models",
        description=f"Print the QuantizedModel CRD. Regenerate the checked-in files with "
        f"`kvant crd --output {CRD_PATH}` and `kvant crd --reference --output {REFERENCE_PATH}`.",
    )
    parser.add_argument("--output", "-o", type=Path, help="write to this file instead of stdout")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if --output differs from a fresh generation; write nothing",
    )
    parser.add_argument("--reference", action="store_true", help="the Markdown CRD reference instead of YAML")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = reference_markdown() if args.reference else crd_yaml()
    if args.check:
        return _check(args.output, text)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _check(path: Path | None, text: str) -> int:
    if path is None:
        print("kvant crd: --check needs --output FILE to compare against", file=sys.stderr)
        return 2
    if not path.is_file() or path.read_text() != text:
        what = "--reference " if path.suffix == ".md" else ""
        print(f"kvant crd: {path} is out of date; run `kvant crd {what}--output {path}`", file=sys.stderr)
        return 1
    return 0
