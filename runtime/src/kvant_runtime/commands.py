"""Registers the runtime's `kvant` subcommands; each lives beside the code it runs."""

from __future__ import annotations

import argparse
import importlib

# One module per command family, each exposing `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "kvant_runtime.gate.cli",
    "kvant_runtime.sim.cli",
    "kvant_runtime.launch.cli",
    "kvant_runtime.convert.cli",
    "kvant_runtime.calibrate.cli",
    "kvant_runtime.evaluate.cli",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
