"""The one error type the converter raises for bad input; the CLI prints it without a traceback."""

from __future__ import annotations


class ConvertError(Exception):
    """Something about the source, the flags or the output directory that the user must fix."""
