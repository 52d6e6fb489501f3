"""The one error type for input the user must fix: a model folder, its files, the data, the flags or
the output folder. Every command (`kvant convert`, `calibrate`, `eval`) prints it without a traceback."""

from __future__ import annotations


class CheckpointError(Exception):
    """Something about a model folder, its files, the data, the flags or the output that the user must fix."""
