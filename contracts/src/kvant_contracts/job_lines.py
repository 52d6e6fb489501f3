"""The JSON lines that Jobs print for the operator, defined once for the printer and the reader.

A Job's container prints JSON objects, one per line, among its other output; the operator reads the
last line that carries a record's key from the pod log. Each record here is printed by the runtime
(`fields()`, merged into the line it writes) and parsed by the operator (`from_log`). A line whose
fields have the wrong types is not taken as a result: `from_log` returns None, as for no line.

- `ConvertProgress`: `kvant convert --progress-json` lines (key `event`), for status messages.
- `ArtifactResult`: the published artifact (key `digest`), on convert's final line and in
  calibrate's result.
- `EvalVerdict`: the accuracy gate's verdict (key `meanKLDivergence`), in eval's result.
- `FetchProgress`: `kvant fetch` progress lines (key `event`, like the converter's, with files in
  place of shards), for the `Fetched` condition.
- `SourceResult`: the fetched, verified source (key `sourceDigest`), on fetch's final line.
- `EngineCheck`: what the engine pod's check found in the serving image (key `sglangVersion`): the
  line `kvant launch --report` prints in the `engine-check` init container, for `status.engine`.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, Self


def last_json_line(text: str, required_key: str) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object holding `required_key`."""
    for raw in reversed(text.strip().splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and required_key in record:
                return record
    return None


class _JobLine:
    KEY: ClassVar[str]

    def fields(self) -> dict[str, Any]:
        record: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # subclasses are dataclasses
        return record

    @classmethod
    def from_log(cls, text: str) -> Self | None:
        record = last_json_line(text, cls.KEY)
        if record is None:
            return None
        values = {}
        for field in fields(cls):  # type: ignore[arg-type]
            if field.name not in record and field.default is not MISSING:
                continue  # a field added later, absent from an older launcher's line: its default
            value = record.get(field.name)
            if not _fits(value, str(field.type)):
                return None
            values[field.name] = value
        return cls(**values)


def _fits(value: object, annotation: str) -> bool:
    optional = annotation.endswith("| None")
    if value is None:
        return optional
    kind = annotation.removesuffix(" | None")
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, str)


@dataclass(frozen=True)
class ConvertProgress(_JobLine):
    KEY: ClassVar[str] = "event"

    event: str  # start | progress | shard | done | error
    shardsDone: int
    shardsTotal: int
    bytesDone: int
    bytesTotal: int
    bytesPerSecond: float
    etaSeconds: float | None


@dataclass(frozen=True)
class ArtifactResult(_JobLine):
    KEY: ClassVar[str] = "digest"

    digest: str
    bytes: int
    sourceBytes: int


@dataclass(frozen=True)
class EvalVerdict(_JobLine):
    KEY: ClassVar[str] = "meanKLDivergence"

    meanKLDivergence: float
    top1Agreement: float
    passed: bool
    failure: str | None


@dataclass(frozen=True)
class FetchProgress(_JobLine):
    KEY: ClassVar[str] = "event"

    event: str  # start | progress | file | done
    filesDone: int
    filesTotal: int
    bytesDone: int
    bytesTotal: int
    bytesPerSecond: float
    etaSeconds: float | None


@dataclass(frozen=True)
class SourceResult(_JobLine):
    KEY: ClassVar[str] = "sourceDigest"

    sourceDigest: str  # sha256 over the manifest's (path, size, sha256) list
    revision: str  # the resolved revision: a commit sha (hf://), a listing digest (s3://)
    path: str  # the published folder, relative to the sources root
    bytes: int
    files: int


@dataclass(frozen=True)
class EngineCheck(_JobLine):
    KEY: ClassVar[str] = "sglangVersion"

    sglangVersion: str
    python: str
    supported: bool
    problem: str | None  # why the launcher cannot drive this image, or why SGLang refused the argv
    device: str = "cuda"  # cuda | cpu
    attentionBackend: str | None = None  # on cpu: intel_amx where the node's CPU has AMX, else torch_native
    amx: bool | None = None  # on cpu: whether the node's CPU has Intel AMX
