"""Entry point of `kvant`.

Each Kvant package registers its subcommands through the `kvant.commands`
entry-point group, so the operator image (no torch) and the runtime image
(no kopf) each get a `kvant` with exactly the commands they can run.
A registrar only declares arguments; heavy imports happen when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvant", description="Kvant: quantized LLMs on SGLang, on Kubernetes."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for entry in sorted(entry_points(group="kvant.commands"), key=lambda e: e.name):
        register: Registrar = entry.load()
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
