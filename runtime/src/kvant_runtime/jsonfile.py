"""Reading the small JSON files of a model folder (config.json, the index) with errors that say which."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path, error: type[Exception], folder: str) -> dict[str, Any]:
    """The JSON object at `path`; otherwise `error`, naming the file (`folder` says what needed it)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise error(f"{path} is missing; a {folder} needs its {path.name}") from err
    except (OSError, json.JSONDecodeError) as err:
        raise error(f"{path}: not readable JSON: {err}") from err
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object")
    return data
