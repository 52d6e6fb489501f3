"""Which SGLang versions `kvant launch` drives, and what the serving image holds.

The launcher builds SGLang's command line from its flags (`argv.py`) and validates it with the
image's own parser, so it drives the versions whose flags it knows: the 0.5 line, against which
`argv.py` and its tests are written. Another version (a 0.4 image, a future 0.6) is refused with a
message naming it, before any weights load, rather than crash-looping on a renamed flag.
"""

from __future__ import annotations

import platform
import re

SUPPORTED = "0.5"  # major.minor of the SGLang versions the launcher drives
_VERSION = re.compile(r"^(\d+)\.(\d+)(\.|$)")


class SGLangMissing(RuntimeError):
    """The serving image has no importable SGLang."""


def installed_version() -> str:
    try:
        from sglang.version import __version__  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: PLC0415
    except ImportError as error:
        raise SGLangMissing(
            f"SGLang is not importable with this image's Python ({platform.python_version()}): {error}; "
            "spec.serving.image must be an SGLang image (e.g. lmsysorg/sglang)"
        ) from None
    return str(__version__)


def unsupported(version: str) -> str | None:
    """Why the launcher cannot drive SGLang `version`, or None."""
    match = _VERSION.match(version)
    if match is None or f"{match[1]}.{match[2]}" != SUPPORTED:
        return (
            f"the image has SGLang {version}; kvant launch drives SGLang {SUPPORTED}.x (its flags and "
            f"their validation are written for that line): use an SGLang {SUPPORTED}.x image"
        )
    return None
