"""Validate an SGLang command line with SGLang's own `ServerArgs` parser, without a GPU.

Importing `sglang.srt.server_args` needs SGLang (installed without its GPU
dependencies) plus a few small packages; see the README's "SGLang without a
GPU". Abbreviated flags are refused: a spec names every flag in full.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from kvant_runtime.launch.argv import FLAG_OWNERS
from kvant_runtime.launch.sglang_support import installed_version


class SGLangRejected(ValueError):
    """SGLang's parser refused the command line; the message is SGLang's and names the flag."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SGLangRejected(message)


def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: PLC0415

    parser = _RaisingParser(prog="sglang.launch_server", allow_abbrev=False, add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def validate_argv(argv: list[str], engine_args: list[str]) -> Any:
    """Parse `argv` as `python -m sglang.launch_server` would; returns SGLang's ServerArgs."""
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: PLC0415

    parser = sglang_parser()
    _refuse_owned_flags(parser, engine_args)
    try:
        namespace = parser.parse_args(argv)
        return ServerArgs.from_cli_args(namespace)
    except SGLangRejected as error:
        raise SGLangRejected(f"SGLang {installed_version()} rejected the command line: {error}") from None
    except (TypeError, ValueError) as error:
        raise SGLangRejected(f"SGLang {installed_version()} rejected the arguments: {error}") from None


def _refuse_owned_flags(parser: argparse.ArgumentParser, engine_args: list[str]) -> None:
    dests = {option: action.dest for action in parser._actions for option in action.option_strings}
    for arg in engine_args:
        option = arg.split("=", 1)[0]
        owner = FLAG_OWNERS.get(dests.get(option, ""))
        if owner is not None:
            raise SGLangRejected(
                f"engineArgs sets {option}, which Kvant derives from the plan's {owner}; "
                f"set {owner} instead of passing {option}"
            )
