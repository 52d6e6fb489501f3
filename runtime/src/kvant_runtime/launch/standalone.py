"""The zipapp's entry point: `python3 kvant-launch.pyz launch ...` in an image without Kvant.

Only `launch` is offered: the zipapp carries the launcher's modules and nothing else (see zipapp.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kvant_runtime.launch.launch_command import add_launch_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvant-launch.pyz", description="Kvant's SGLang launcher")
    add_launch_parser(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.run(args))
