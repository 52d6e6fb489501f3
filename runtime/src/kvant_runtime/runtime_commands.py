"""Registers the runtime's `kvant` subcommands; each lives beside the code it runs."""

from __future__ import annotations

from kvant_cli.modules import SubParsers, register_modules

# One module per command family, each exposing `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "kvant_runtime.gate.gate_command",
    "kvant_runtime.sim.sim_command",
    "kvant_runtime.launch.launch_command",
    "kvant_runtime.convert.convert_command",
    "kvant_runtime.calibrate.calibrate_command",
    "kvant_runtime.evaluate.eval_command",
    "kvant_runtime.fetch.fetch_command",
    "kvant_runtime.router_command",
)


def register(subparsers: SubParsers) -> None:
    register_modules(subparsers, _COMMAND_MODULES)
