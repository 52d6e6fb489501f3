"""SGLang's server info without its secrets.

SGLang 0.5.23's `/server_info` (and the deprecated `/get_server_info`) answer every resolved server
argument in plain text, `admin_api_key`, `api_key` and `ssl_keyfile_password` among them, and the
launch command line that carried them (`ServerArgs.resolved_dict`, `build_server_info`; only
watermark secrets are redacted). The engine gets `--admin-api-key` from
`spec.access.adminTokenSecret`, and these are read routes any client may call: relayed as they are,
they would hand every client the admin token. So the gate relays them with each such value replaced
by `REDACTED`; the rest (the model, the cache size, the scheduler settings) stays readable, as
routers and dashboards read it.
"""

from __future__ import annotations

import json
import re
from typing import Any

PATHS = frozenset({"/server_info", "/get_server_info"})
REDACTED = "REDACTED"
# Field names whose values are secrets: SGLang's api_key, admin_api_key (and any later *_api_key), and
# ssl_keyfile_password, which engineArgs may set.
_SECRET_FIELD = re.compile(r"(^|_)api_key$|password")
# The same flags in a command line: `--api-key X`, `--admin-api-key=X`, `--ssl-keyfile-password X`.
_SECRET_FLAG = re.compile(r"(--(?:[a-z-]*-)?(?:api-key|password))(=|\s+)(\S+)")


def redact(body: bytes) -> bytes:
    """`body` (the engine's JSON answer) with every secret replaced; raises ValueError when it is not
    JSON, so an answer the gate cannot read is not relayed at all."""
    return json.dumps(_redacted(json.loads(body))).encode()


def _redacted(value: Any, name: str = "") -> Any:
    if isinstance(value, dict):
        return {key: _redacted(item, str(key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    if _SECRET_FIELD.search(name) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str) and ("api-key" in value or "password" in value):
        return _SECRET_FLAG.sub(lambda found: f"{found.group(1)}{found.group(2)}{REDACTED}", value)
    return value
