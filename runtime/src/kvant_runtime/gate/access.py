"""Who may do what at the gate: the admin token, and the client API keys, each read from a mounted
Secret file (the kubelet refreshes it when the Secret changes; the gate re-reads a file whose
modification time moved, so a rotated key works without a restart).

- Admin routes (`route_policy.RouteClass.ADMIN`) need `Authorization: Bearer <admin token>`; with no
  token file they are closed to everyone (403).
- With an API-keys file, every other route but health, readiness and metrics needs
  `Authorization: Bearer <key>` (401 otherwise), as OpenAI-compatible clients send it. The admin
  token is accepted there too.

Comparisons are constant-time. An empty or unreadable file holds no key: it closes, never opens.
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

log = logging.getLogger("kvant.gate")
# Probes and scrapes carry no secrets (SGLang exempts the same prefixes).
_OPEN_PREFIXES = ("/health", "/ready", "/metrics", "/ping")


class SecretFile:
    """The non-empty lines of one mounted Secret file, re-read when it changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._mtime: float | None = None
        self._values: tuple[str, ...] = ()

    @property
    def configured(self) -> bool:
        return self.path is not None

    def values(self) -> tuple[str, ...]:
        if self.path is None:
            return ()
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._mtime:
                lines = self.path.read_text().splitlines()
                self._values = tuple(line.strip() for line in lines if line.strip())
                self._mtime = mtime
        except OSError as err:
            log.warning("event=secret_unreadable path=%s error=%s", self.path, err.strerror or err)
            self._values, self._mtime = (), None
        return self._values


class Access:
    def __init__(self, admin_token_file: Path | None = None, api_keys_file: Path | None = None) -> None:
        self.admin = SecretFile(admin_token_file)
        self.keys = SecretFile(api_keys_file)

    def admin_allowed(self, authorization: str | None) -> bool:
        return _matches(authorization, self.admin.values())

    def client_allowed(self, path: str, authorization: str | None) -> bool:
        if not self.keys.configured or path.startswith(_OPEN_PREFIXES):
            return True
        return _matches(authorization, (*self.keys.values(), *self.admin.values()))


def _matches(authorization: str | None, accepted: tuple[str, ...]) -> bool:
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False
    found = False
    for value in accepted:  # no early exit: the time taken does not depend on which key matched
        found |= hmac.compare_digest(presented.strip().encode(), value.encode())
    return found
