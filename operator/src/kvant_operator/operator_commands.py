"""Registers the operator's `kvant` subcommands; each lives beside the code it runs."""

from __future__ import annotations

from kvant_cli.modules import SubParsers, register_modules

# One module per command family, each exposing `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "kvant_operator.api.crd_command",
    "kvant_operator.planner.plan_command",
    "kvant_operator.render.render_command",
    "kvant_operator.oncall.status_command",
    "kvant_operator.run",
)


def register(subparsers: SubParsers) -> None:
    register_modules(subparsers, _COMMAND_MODULES)
