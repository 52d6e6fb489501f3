"""Registering a package's command modules, each of which exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable

SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def register_modules(subparsers: SubParsers, modules: Iterable[str]) -> None:
    for name in modules:
        importlib.import_module(name).register(subparsers)
