"""Registering a package's command modules, each of which exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable
from typing import TypeAlias

# A string: argparse's action class is not subscriptable at run time.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register_modules(subparsers: SubParsers, modules: Iterable[str]) -> None:
    for name in modules:
        importlib.import_module(name).register(subparsers)
