"""`kvant render -f qm.yaml`: every object the operator would create, as YAML, without a cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the Kubernetes objects the operator would create for a QuantizedModel",
        description="Renders the plan Job, the artifact Job and the serving objects with the operator's own "
        "renderers. The capacity plan is computed from --checkpoint (default: a file:// source).",
    )
    parser.add_argument("-f", "--filename", type=Path, required=True, help="QuantizedModel YAML")
    parser.add_argument("--checkpoint", type=Path, help="config.json or checkpoint folder to plan from")
    parser.add_argument("--namespace", default="default", help="namespace when the file names none")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvant_operator.render.offline import OfflineRenderError, render_offline  # noqa: PLC0415

    try:
        objects = render_offline(yaml.safe_load(args.filename.read_text()), args.checkpoint, args.namespace)
    except (OSError, OfflineRenderError) as err:
        print(f"kvant render: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0
