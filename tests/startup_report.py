"""Fixture start-up times, written to the terminal past pytest's output capture."""

from __future__ import annotations

import sys
import time

import pytest


def report_startup(config: pytest.Config, what: str, started: float) -> None:
    line = f"\n[fixture] {what} started in {time.monotonic() - started:.1f}s"
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        sys.stderr.write(line + "\n")
        return
    with capture.global_and_fixture_disabled():
        sys.stderr.write(line + "\n")
