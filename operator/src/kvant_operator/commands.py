"""Registers the operator's `kvant` subcommands; each lives beside the code it runs."""

from __future__ import annotations

import argparse
import importlib

# One module per command family, each exposing `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "kvant_operator.api.cli",
    "kvant_operator.planner.cli",
    "kvant_operator.render.cli",
    "kvant_operator.run",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
