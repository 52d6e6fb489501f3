"""The one error type for bad input to calibrate and eval; the CLIs print it without a traceback."""

from __future__ import annotations


class ModelInputError(Exception):
    """Something about a model directory, the data or the flags that the user must fix."""
