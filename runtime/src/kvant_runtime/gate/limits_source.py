"""Where the gate's limits come from (the mounted file, and the limits ConfigMap through the API), and
which of the two is in force.

Both carry the same document: the kubelet projects the ConfigMap's `limits.yaml` key into the file.
The API has an edit within a second; the file gets it only on the kubelet's next pod sync, up to
~90 s later. Neither carries a version the other can compare (the kubelet projects data keys only),
so "newer" is judged by what the API has delivered, in order:

- While the API watch is live, its content is in force and the file is only followed, never applied:
  a file that differs is a projection that lags behind (or, for a moment, one that got an edit just
  before our watch did, which the watch then delivers itself). This is what keeps a lagging file
  from overriding a fresh API value.
- While it is not (no API access configured, unreachable, forbidden, the ConfigMap missing), a
  *change* of the file applies, unless the new content is one the API already delivered after the
  file's last match: that is the projection catching up, older than (or equal to) what is in force.
  A content the API never delivered is an edit made since the watch was lost, so it applies.

One case cannot be told apart without versions: while the API is lost, an edit back to exactly the
content the file still shows changes no file, so the gate keeps the API's last value until the API
is back. The file alone (no API access) behaves as it always did: every change applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

log = logging.getLogger("kvant.gate")
Origin = Literal["file", "api"]
ORIGINS: tuple[Origin, ...] = ("file", "api")
_API_HISTORY = 64  # contents the API delivered that a lagging file is matched against


@dataclass(frozen=True)
class LimitsText:
    """One reading of the limits document. `content` is None when the source cannot say (`problem`
    says why): an unreadable file, or an API that is unreachable, forbidden or lacks the ConfigMap."""

    origin: Origin
    where: str  # names the document in logs and errors: the file path, or the ConfigMap and its version
    content: bytes | None
    problem: str = ""


Offer = Callable[[LimitsText], None]


class LimitsSource(Protocol):
    """A source of the limits document: `follow` runs until cancelled and offers a `LimitsText`
    whenever what it reads changes (the content, or whether it can read it at all)."""

    async def follow(self, offer: Offer) -> None: ...


class LimitsFile:
    """The mounted limits file, read whole every `interval` and compared by content: the kubelet (and
    the dev node agent) swaps a `..data` symlink, so the path itself never changes, and a rewrite
    within the same second can keep the target's mtime."""

    def __init__(self, path: Path, interval: float) -> None:
        self.path, self.interval = path, interval
        self._last: LimitsText | None = None  # the latest read: the gate's first, then each of `follow`

    def read(self) -> LimitsText:
        where = str(self.path)
        try:
            text = LimitsText("file", where, self.path.read_bytes())
        except OSError as err:
            problem = f"{where}: cannot read the limits file: {err.strerror or err}"
            text = LimitsText("file", where, None, problem)
        self._last = text
        return text

    async def follow(self, offer: Offer) -> None:
        while True:
            await asyncio.sleep(self.interval)
            last = self._last
            text = self.read()
            if text != last:
                offer(text)


class LimitsArbiter:
    """Decides, for each offered reading, whether it goes in force (see the module docstring)."""

    def __init__(self, first_file: bytes) -> None:
        self.api_live = False
        self._api_seen: list[bytes] = []  # what the API delivered, oldest first, consecutive repeats folded
        self._file = first_file
        self._file_at = -1  # the index in _api_seen the file last matched; -1: none yet

    def offer(self, text: LimitsText) -> LimitsText | None:
        """The reading to put in force (or, with no content, whose problem to report), else None."""
        return self._from_api(text) if text.origin == "api" else self._from_file(text)

    def _from_api(self, text: LimitsText) -> LimitsText | None:
        if text.content is None:
            self.api_live = False  # the watch logs its own problems; the limits in force stay
            return None
        self.api_live = True
        if not self._api_seen or self._api_seen[-1] != text.content:
            self._api_seen.append(text.content)
            if len(self._api_seen) > _API_HISTORY:
                del self._api_seen[0]
                self._file_at = max(-1, self._file_at - 1)
        if text.content == self._file:
            self._file_at = len(self._api_seen) - 1
        return text

    def _from_file(self, text: LimitsText) -> LimitsText | None:
        if text.content is None:
            return None if self.api_live else text  # with the API live, the file is only a fallback
        if text.content == self._file:
            return None
        self._file = text.content
        later = self._api_seen[self._file_at + 1 :]
        if text.content in later:
            self._file_at += 1 + later.index(text.content)  # catching up: nothing newer than the API's
            log.debug("event=limits_file_ignored reason=behind_api file=%s", text.where)
            return None
        if self.api_live:
            log.debug("event=limits_file_ignored reason=api_live file=%s", text.where)
            return None
        self._file_at = len(self._api_seen) - 1  # ahead of all the API said: what it says next is newer
        return text
