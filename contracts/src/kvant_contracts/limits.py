"""The limits document: what the operator (or on-call) tells the gate, defined once for both sides.

The operator renders a `Limits` into the limits ConfigMap (`render_limits`); the gate reads the file
back (`parse_limits_text`). The document is YAML or JSON (JSON is YAML), with the QuantizedModel's
own field names. A document that fails validation raises `LimitsError` naming the field and what
would be valid.

`tenancy` (kvant_contracts.tenancy) is optional even in a file: a document without it serves every
request as one default tenant, as before tenancy existed.

A *file* must carry every field the operator writes (`FILE_FIELDS`). A file that is empty, or cut
short by a writer that does not replace it atomically, is refused, and the gate keeps the limits it
had; it is never read as "all defaults". A mapping built in code (`parse_limits`) may leave fields
out and gets the defaults below.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Literal, cast

import yaml

from kvant_contracts.tenancy import PRIORITIES, Priority, Tenancy, Tenant, valid_tenant_name


class ProtectionMode(StrEnum):
    """enforce: lower the effective concurrency under KV pressure. observe: only report. off: do nothing."""

    ENFORCE = "enforce"
    OBSERVE = "observe"
    OFF = "off"


MODES: tuple[str, ...] = tuple(mode.value for mode in ProtectionMode)
Oversize = Literal["refuse", "runAlone"]
OVERSIZE: tuple[Oversize, ...] = ("refuse", "runAlone")
AdmissionMode = Literal["engine", "forecast", "worstCase"]
ADMISSION_MODES: tuple[AdmissionMode, ...] = ("engine", "forecast", "worstCase")
LIMITS_FILE = "limits.yaml"  # the ConfigMap key, hence the file name in the gate's mount
# What the operator always writes, so a file missing one of them is incomplete, not "defaults".
FILE_FIELDS = (
    "mode",
    "maxConcurrency",
    "maxQueued",
    "queueTimeoutSeconds",
    "targetTokenUsage",
    "maxRetractionsPerMinute",
    "concurrency",
)


class LimitsError(ValueError):
    """The limits file is unreadable or invalid; the message says where and what would be valid."""


@dataclass(frozen=True)
class ConcurrencyBounds:
    """`concurrency`: the range the local loop may move the effective concurrency in, and its steps.

    The one home of the AIMD constants: the gate's loop uses them, the operator's protection loop cuts
    by the same decreaseFactor.
    """

    # 1 as in the CR (spec.protection.concurrency.min): the only floor valid for every maxConcurrency.
    min: int = 1
    max: int = 128
    decreaseFactor: float = 0.75  # multiplicative decrease on saturation
    increaseStep: int = 1  # additive increase per healthy tick


@dataclass(frozen=True)
class Limits:
    """One validated limits file. Field names are the CR's, so they read the same everywhere."""

    mode: str = ProtectionMode.ENFORCE.value  # one of MODES
    maxConcurrency: int = 64
    maxQueued: int = 256
    queueTimeoutSeconds: float = 30.0
    targetTokenUsage: float = 0.90
    maxRetractionsPerMinute: int = 0
    concurrency: ConcurrencyBounds = ConcurrencyBounds()
    maxRequestBytes: int = 16 * 1024 * 1024
    # Request bodies held while they wait in the queue, at most; past it a request is turned away
    # (429) rather than buffered, so a queue of large bodies cannot exhaust the gate's memory.
    maxQueuedBytes: int = 256 * 1024 * 1024
    retryAfterSeconds: int = 1
    # The output limit reserved for (and written into) a request that names none.
    defaultMaxTokens: int = 2048
    # A request that needs more KV than the whole budget: 413 (refuse), or run it with nothing else.
    oversizeRequests: Oversize = "refuse"
    # How the gate decides a request may start: on the engine's own state (engine: keep its waiting
    # queue short, let it reserve KV as it does anyway), or by reserving tokens itself, its prompt plus
    # a forecast of its output (forecast) or its whole output limit (worstCase: never a retraction,
    # fewer requests admitted). bench/README "Protection on the real engine" measured the choice.
    admission: AdmissionMode = "engine"
    forecastQuantile: float = 0.95
    # Tenants, priority classes and fair shares (kvant_contracts.tenancy); the default is one tenant.
    tenancy: Tenancy = field(default_factory=Tenancy)

    @property
    def concurrency_ceiling(self) -> int:
        """The highest effective concurrency: on-call's `maxConcurrency` wins over `concurrency.max`."""
        return min(self.concurrency.max, self.maxConcurrency)

    @property
    def concurrency_floor(self) -> int:
        """The lowest effective concurrency the local loop may reach (never above the ceiling)."""
        return min(self.concurrency.min, self.concurrency_ceiling)


def parse_limits(data: object, source: str = "limits") -> Limits:
    """Validates a decoded limits document; `source` names it in errors (usually the file path)."""
    top = _Fields(data if data is not None else {}, source, "", Limits)
    inner = _Fields(top.get("concurrency", {}), source, "concurrency.", ConcurrencyBounds)
    defaults, default_bounds = Limits(), ConcurrencyBounds()
    bounds = ConcurrencyBounds(
        min=inner.integer("min", default_bounds.min, minimum=1),
        max=inner.integer("max", default_bounds.max, minimum=1),
        decreaseFactor=inner.fraction("decreaseFactor", default_bounds.decreaseFactor),
        increaseStep=inner.integer("increaseStep", default_bounds.increaseStep, minimum=1),
    )
    if bounds.decreaseFactor == 1.0:
        raise inner.error("decreaseFactor", "must be below 1 (1 would never lower the concurrency)")
    if bounds.min > bounds.max:
        raise inner.error("min", f"must not exceed concurrency.max ({bounds.max})")
    return Limits(
        mode=top.choice("mode", defaults.mode, MODES),
        maxConcurrency=top.integer("maxConcurrency", defaults.maxConcurrency, minimum=1),
        maxQueued=top.integer("maxQueued", defaults.maxQueued, minimum=0),
        queueTimeoutSeconds=top.positive("queueTimeoutSeconds", defaults.queueTimeoutSeconds),
        targetTokenUsage=top.fraction("targetTokenUsage", defaults.targetTokenUsage),
        maxRetractionsPerMinute=top.integer(
            "maxRetractionsPerMinute", defaults.maxRetractionsPerMinute, minimum=0
        ),
        concurrency=bounds,
        maxRequestBytes=top.integer("maxRequestBytes", defaults.maxRequestBytes, minimum=1),
        maxQueuedBytes=top.integer("maxQueuedBytes", defaults.maxQueuedBytes, minimum=1),
        retryAfterSeconds=top.integer("retryAfterSeconds", defaults.retryAfterSeconds, minimum=1),
        defaultMaxTokens=top.integer("defaultMaxTokens", defaults.defaultMaxTokens, minimum=1),
        oversizeRequests=cast(Oversize, top.choice("oversizeRequests", defaults.oversizeRequests, OVERSIZE)),
        admission=cast(AdmissionMode, top.choice("admission", defaults.admission, ADMISSION_MODES)),
        forecastQuantile=top.fraction("forecastQuantile", defaults.forecastQuantile),
        tenancy=_parse_tenancy(top.get("tenancy", {}), source),
    )


def _parse_tenancy(data: object, source: str) -> Tenancy:
    """`tenancy`, with errors naming the field down to the tenant's index (`tenancy.tenants[2].weight`)."""
    doc = _Fields(data if data is not None else {}, source, "tenancy.", Tenancy)
    defaults = Tenancy()
    default_priority = cast(Priority, doc.choice("defaultPriority", defaults.defaultPriority, PRIORITIES))
    entries = doc.get("tenants", [])
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise doc.error("tenants", "must be a list of tenants (name, priority, weight, tokensPerMinute)")
    tenants: list[Tenant] = []
    for index, entry in enumerate(entries):
        tenants.append(_parse_tenant(entry, source, f"tenancy.tenants[{index}].", default_priority))
        if any(seen.name == tenants[-1].name for seen in tenants[:-1]):
            raise LimitsError(
                f"{source}: tenancy.tenants[{index}].name must be unique, got {tenants[-1].name!r} twice"
            )
    return Tenancy(
        defaultPriority=default_priority,
        tenants=tuple(tenants),
        outputTokenWeight=doc.positive("outputTokenWeight", defaults.outputTokenWeight),
        sheddableQueueShare=doc.share("sheddableQueueShare", defaults.sheddableQueueShare),
        criticalReserve=doc.share("criticalReserve", defaults.criticalReserve),
    )


def _parse_tenant(data: object, source: str, prefix: str, default_priority: Priority) -> Tenant:
    entry = _Fields(data, source, prefix, Tenant)
    if "name" not in entry.data:
        raise LimitsError(f"{source}: {prefix}name is required")
    name = entry.get("name", None)
    if not isinstance(name, str) or not valid_tenant_name(name):
        raise entry.error(
            "name",
            "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit (and not "
            "'other', the metrics' bucket for the rest)",
        )
    rate = entry.get("tokensPerMinute", None)
    return Tenant(
        name=name,
        # An entry that names no class keeps the document's default: setting a weight alone does
        # not move a tenant between classes.
        priority=cast(Priority, entry.choice("priority", default_priority, PRIORITIES)),
        weight=entry.positive("weight", 1.0),
        tokensPerMinute=None if rate is None else entry.integer("tokensPerMinute", 0, minimum=1),
    )


def parse_limits_text(text: bytes | str, source: str) -> Limits:
    """Decodes a limits file (YAML or JSON), then validates it; every `FILE_FIELDS` field must be there."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise LimitsError(f"{source}: not valid YAML or JSON: {err}") from err
    if data is None:
        raise LimitsError(f"{source}: the limits file is empty; it must hold {', '.join(FILE_FIELDS)}")
    if isinstance(data, Mapping):
        missing = [name for name in FILE_FIELDS if name not in data]
        if missing:
            raise LimitsError(
                f"{source}: incomplete limits file (cut short by a non-atomic write?): missing "
                f"{', '.join(missing)}"
            )
    return parse_limits(data, source)


def render_limits(limits: Limits) -> str:
    """The file the operator writes for `limits`: every field, keys sorted; `tenancy` only when it is
    not the default (a single tenant), so documents without tenants read as they always did."""
    document = asdict(limits)
    tenancy = document.pop("tenancy")
    if limits.tenancy != Tenancy():
        # YAML's safe dumper writes lists, not tuples; an unset rate limit is left out, not null.
        tenants = [{k: v for k, v in t.items() if v is not None} for t in tenancy["tenants"]]
        document["tenancy"] = {**tenancy, "tenants": tenants}
    parse_limits(document, "the rendered limits")  # what the gate would refuse is never written
    return yaml.safe_dump(document, sort_keys=True)


class _Fields:
    """One mapping of the document, read field by field with errors that name the field."""

    def __init__(self, data: object, source: str, prefix: str, model: type[Any]) -> None:
        self.source, self.prefix = source, prefix
        where = prefix.rstrip(".") or "the document"
        if not isinstance(data, Mapping):
            raise LimitsError(f"{source}: {where} must be a mapping of field names to values, got {data!r}")
        self.data = cast(Mapping[str, Any], data)
        known = {f.name for f in fields(model)}
        unknown = sorted(str(key) for key in self.data if key not in known)
        if unknown:
            raise LimitsError(
                f"{source}: unknown field(s) {', '.join(prefix + k for k in unknown)}; "
                f"valid fields are {', '.join(prefix + k for k in sorted(known))}"
            )

    def get(self, key: str, default: object) -> Any:
        return self.data.get(key, default)

    def error(self, key: str, must: str) -> LimitsError:
        return LimitsError(f"{self.source}: {self.prefix}{key} {must}, got {self.data.get(key)!r}")

    def choice(self, key: str, default: str, allowed: tuple[str, ...]) -> str:
        value = self.data.get(key, default)
        if value not in allowed:
            raise self.error(key, f"must be one of {', '.join(allowed)}")
        return str(value)

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        # bool is an int subclass; `maxQueued: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, "must be a number")
        if not math.isfinite(value):
            raise self.error(key, "must be a finite number")
        return float(value)

    def integer(self, key: str, default: int, *, minimum: int) -> int:
        value = self.number(key, default)
        if not value.is_integer() or value < minimum:
            raise self.error(key, f"must be a whole number ≥ {minimum}")
        return int(value)

    def positive(self, key: str, default: float) -> float:
        value = self.number(key, default)
        if value <= 0:
            raise self.error(key, "must be above 0")
        return value

    def fraction(self, key: str, default: float) -> float:
        value = self.number(key, default)
        if not 0.0 < value <= 1.0:
            raise self.error(key, "must be a fraction in (0, 1]")
        return value

    def share(self, key: str, default: float) -> float:
        """A fraction that may be 0 (none) or 1 (all)."""
        value = self.number(key, default)
        if not 0.0 <= value <= 1.0:
            raise self.error(key, "must be a fraction in [0, 1]")
        return value
