"""Registers the runtime's `kvant` subcommands; each lives beside the code it runs."""

from __future__ import annotations

from kvant_cli.modules import SubParsers, register_modules

# One module per command family, each exposing `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "kvant_runtime.gate.cli",
    "kvant_runtime.sim.cli",
    "kvant_runtime.launch.cli",
    "kvant_runtime.convert.cli",
    "kvant_runtime.calibrate.cli",
    "kvant_runtime.evaluate.cli",
)


def register(subparsers: SubParsers) -> None:
    register_modules(subparsers, _COMMAND_MODULES)
