"""Progress of a conversion, for people (a bar on a TTY, a line per shard otherwise) and for the operator.

The machine-readable form is JSON lines (`kvant_contracts.job_lines.ConvertProgress`), one object per
event, flushed as written:

    {"event": "start" | "progress" | "shard" | "done" | "error",
     "shardsDone": int, "shardsTotal": int, "bytesDone": int, "bytesTotal": int,
     "bytesPerSecond": float, "etaSeconds": float | null,
     "shard": str (event "shard": the shard just finished), "message": str (event "error")}

Bytes are source bytes of the shards this worker converts; shards skipped on resume count as done.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

from kvant_contracts.job_lines import ConvertProgress

_BAR_WIDTH = 30
_TTY_INTERVAL_S = 0.2
_JSON_INTERVAL_S = 2.0


class Progress:
    def __init__(self, human: TextIO | None = sys.stderr, machine: TextIO | None = None) -> None:
        self._human = human
        self._machine = machine
        self._tty = bool(human is not None and human.isatty())
        self._lock = threading.Lock()
        self.shards_done = self.shards_total = self.bytes_done = self.bytes_total = 0
        self._started = time.monotonic()
        self._bytes_at_start = 0
        self._last_tty = self._last_json = 0.0

    def start(self, shards_total: int, bytes_total: int, shards_done: int, bytes_done: int) -> None:
        self.shards_total, self.bytes_total = shards_total, bytes_total
        self.shards_done, self.bytes_done = shards_done, bytes_done
        self._bytes_at_start = bytes_done
        self._started = time.monotonic()
        skipped = f" ({shards_done} already done, skipped)" if shards_done else ""
        self._say(
            f"converting {shards_total - shards_done} of {shards_total} shards, {_gb(bytes_total)}{skipped}"
        )
        self._emit("start")

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_done += nbytes
            now = time.monotonic()
            if self._tty and now - self._last_tty >= _TTY_INTERVAL_S:
                self._last_tty = now
                self._draw_bar()
            if now - self._last_json >= _JSON_INTERVAL_S:
                self._last_json = now
                self._emit("progress")

    def shard_done(self, shard: str) -> None:
        with self._lock:
            self.shards_done += 1
            if self._tty:
                self._draw_bar()
            else:
                self._say(f"shard {shard} done ({self.shards_done}/{self.shards_total}, {self._rate_text()})")
            self._emit("shard", shard=shard)

    def note(self, message: str) -> None:
        self._say(message)

    def done(self, message: str, **result: Any) -> None:
        self._say(message)
        self._emit("done", message=message, **result)

    def error(self, message: str) -> None:
        self._emit("error", message=message)

    def _rate(self) -> float:
        elapsed = time.monotonic() - self._started
        return (self.bytes_done - self._bytes_at_start) / elapsed if elapsed > 0 else 0.0

    def _eta(self) -> float | None:
        rate = self._rate()
        return (self.bytes_total - self.bytes_done) / rate if rate > 0 else None

    def _rate_text(self) -> str:
        eta = self._eta()
        eta_text = f"ETA {int(eta) // 60}:{int(eta) % 60:02d}" if eta is not None else "ETA -"
        return f"{_gb(self.bytes_done)}/{_gb(self.bytes_total)}, {self._rate() / 1e6:.0f} MB/s, {eta_text}"

    def _draw_bar(self) -> None:
        assert self._human is not None
        filled = int(_BAR_WIDTH * self.bytes_done / self.bytes_total) if self.bytes_total else _BAR_WIDTH
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        line = f"\r[{bar}] {self.shards_done}/{self.shards_total} shards {self._rate_text()}"
        self._human.write(line + ("\n" if self.shards_done == self.shards_total else ""))
        self._human.flush()

    def _say(self, message: str) -> None:
        if self._human is not None:
            self._human.write(f"kvant convert: {message}\n")
            self._human.flush()

    def _emit(self, event: str, **extra: Any) -> None:
        if self._machine is None:
            return
        line = ConvertProgress(
            event=event,
            shardsDone=self.shards_done,
            shardsTotal=self.shards_total,
            bytesDone=self.bytes_done,
            bytesTotal=self.bytes_total,
            bytesPerSecond=round(self._rate(), 1),
            etaSeconds=None if (eta := self._eta()) is None else round(eta, 1),
        )
        record = {**line.fields(), **extra}
        self._machine.write(json.dumps(record) + "\n")
        self._machine.flush()


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB"
