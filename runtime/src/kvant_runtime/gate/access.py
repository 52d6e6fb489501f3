"""Who may do what at the gate: the admin token, and the client API keys, each read from a mounted
Secret file (the kubelet refreshes it when the Secret changes; the gate re-reads a file whose
modification time moved, so a rotated key works without a restart).

- Admin routes (`route_policy.RouteClass.ADMIN`) need `Authorization: Bearer <admin token>`; with no
  token file they are closed to everyone (403).
- With an API-keys file, every other route but health, readiness, metrics and the model list
  (`/v1/models`, which the router reads to register a gate) needs `Authorization: Bearer <key>`
  (401 otherwise), as OpenAI-compatible clients send it. The admin
  token is accepted there too.

Comparisons are constant-time. An empty or unreadable file holds no key: it closes, never opens.

Who is asking (kvant_contracts.tenancy): each line of the API-keys file is
`<key> [tenant=<name>] [priority=<class>] [trusted]`. An authorized request gets an `Identity`:
- the key's own `tenant=` / `priority=` always win;
- the tenant and priority headers are honoured only from a trusted source, a key marked `trusted` (a
  gateway in front of the model hands its key) or the admin token; from anyone else they are ignored,
  so no client can claim another tenant's share or a higher class;
- otherwise the tenant is the default one, and the class is left to the limits (`Identity.priority`
  None: the tenant's entry, else the default class, resolved by admission so live edits apply).
A line that does not parse holds no key (closed, never opened); the log names its entry number (of the
non-empty lines) and never its words.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kvant_contracts.tenancy import (
    DEFAULT_TENANT,
    PRIORITY_HEADER,
    TENANT_HEADER,
    Priority,
    as_priority,
    valid_tenant_name,
)

log = logging.getLogger("kvant.gate")
# Probes and scrapes carry no secrets (SGLang exempts the same prefixes). And the model list: the
# router (smg) reads a discovered gate's `GET /v1/models` to learn what it serves before it routes
# anything to it, and sends no key; with the list behind a key, a model with API keys and a router
# never served (e2e: the router registered no engine). It names the served model, which the router
# answers to anyone on its own `/v1/models` anyway; nothing that list is for needs a generation.
_OPEN_PREFIXES = ("/health", "/ready", "/metrics", "/ping", "/v1/models")


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


@dataclass(frozen=True)
class Identity:
    """Who an authorized request is for: its tenant, the class its key or a trusted header sets (None:
    the limits decide), and whether its source may speak for others (a gateway, the admin)."""

    tenant: str = DEFAULT_TENANT
    priority: Priority | None = None
    trusted: bool = False


@dataclass(frozen=True)
class ApiKey:
    """One line of the API-keys file."""

    key: str
    tenant: str | None = None
    priority: Priority | None = None
    trusted: bool = False


def parse_key_line(line: str) -> ApiKey:
    """`<key> [tenant=<name>] [priority=<class>] [trusted]`; raises ValueError saying what is wrong
    (never quoting the key)."""
    key, *options = line.split()
    tenant: str | None = None
    priority: Priority | None = None
    trusted = False
    for position, option in enumerate(options, start=2):
        name, equals, value = option.partition("=")
        if option == "trusted":
            trusted = True
        elif name == "tenant" and equals and valid_tenant_name(value):
            tenant = value
        elif name == "priority" and equals and (parsed := as_priority(value)) is not None:
            priority = parsed
        else:
            # The option is not quoted: a key with a space in it would leak its second half to the log.
            raise ValueError(
                f"word {position} is not tenant=<name>, priority=critical|standard|sheddable or trusted"
            )
    return ApiKey(key, tenant, priority, trusted)


class Access:
    def __init__(self, admin_token_file: Path | None = None, api_keys_file: Path | None = None) -> None:
        self.admin = SecretFile(admin_token_file)
        self.keys = SecretFile(api_keys_file)
        self._parsed_lines: tuple[str, ...] = ()
        self._parsed: tuple[ApiKey, ...] = ()

    def admin_allowed(self, authorization: str | None) -> bool:
        return _match(authorization, self.admin.values()) is not None

    def client_allowed(self, path: str, authorization: str | None) -> bool:
        return self.identify(path, authorization, {}) is not None

    def identify(self, path: str, authorization: str | None, headers: Mapping[str, str]) -> Identity | None:
        """The identity of a client request, or None when it needs a key it did not present."""
        if path.startswith(_OPEN_PREFIXES):
            return Identity()  # probes and scrapes: never admitted, so nobody in particular
        admins = self.admin.values()
        if not self.keys.configured:
            # Open to all, so nobody's headers are believed, except the admin's (it could do more).
            trusted = bool(admins) and _match(authorization, admins) is not None
            return _from_headers(Identity(trusted=trusted), headers) if trusted else Identity()
        keys = self._keys()
        # One pass over keys and admin tokens together, as before: the time taken does not tell which
        # kind of secret matched.
        found = _match(authorization, (*(k.key for k in keys), *admins))
        if found is None:
            return None
        if found >= len(keys):
            return _from_headers(Identity(trusted=True), headers)
        key = keys[found]
        own = Identity(key.tenant or DEFAULT_TENANT, key.priority, key.trusted)
        if not key.trusted:
            return own
        honoured = _from_headers(own, headers)
        # The key's own tenant= and priority= win over what the gateway's headers say.
        return Identity(key.tenant or honoured.tenant, key.priority or honoured.priority, trusted=True)

    def _keys(self) -> tuple[ApiKey, ...]:
        lines = self.keys.values()
        if lines is not self._parsed_lines:  # re-parsed only when the file was re-read
            parsed: list[ApiKey] = []
            for number, line in enumerate(lines, start=1):
                try:
                    parsed.append(parse_key_line(line))
                except ValueError as err:
                    log.warning(
                        "event=api_key_entry_invalid path=%s entry=%d error=%s", self.keys.path, number, err
                    )
            self._parsed_lines, self._parsed = lines, tuple(parsed)
        return self._parsed


def _from_headers(identity: Identity, headers: Mapping[str, str]) -> Identity:
    """`identity` with the tenant and class a trusted source's headers name (invalid values ignored)."""
    tenant = (headers.get(TENANT_HEADER) or "").strip()
    priority = as_priority(headers.get(PRIORITY_HEADER) or "")
    return Identity(
        tenant if valid_tenant_name(tenant) else identity.tenant,
        priority if priority is not None else identity.priority,
        identity.trusted,
    )


def _match(authorization: str | None, accepted: tuple[str, ...]) -> int | None:
    """The index of the secret a bearer `authorization` presents, or None."""
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return None
    token = presented.strip().encode()
    found = -1
    for index, value in enumerate(accepted):
        # No early exit: the time taken does not depend on which key matched.
        hit = hmac.compare_digest(token, value.encode())
        found = index if hit and found < 0 else found
    return found if found >= 0 else None
