"""The operator's one content hash: of a spec, a rendered object or a recipe, as canonical JSON. On
the bottom floor (it imports nothing of the operator), so that renderers and reconcile steps alike
take it from here."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(data: Any, length: int = 16) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]
