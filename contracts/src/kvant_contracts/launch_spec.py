"""The launch spec: what `kvant launch` reads, defined once for the operator that renders it into the
engine container's `--spec-json` (`LaunchSpec.to_json`) and the launcher that parses it back.

A JSON or YAML object with the plan's decisions for one serving pod. Field
names are the CRD's (`tensorParallel`, `memFractionStatic`, `engineArgs`, ...):

    modelPath: /artifacts/qwen3-int4        # the artifact folder (required)
    servedModelName: qwen3                  # required
    weightsFormat: int4                     # bf16 | fp8 | int4 (required)
    kvCacheDtype: fp8_e4m3                  # auto | bf16 | fp8_e4m3 | fp8_e5m2
    tensorParallel: 8
    artifactDigest: sha256:...              # the manifest must match; null = check it if present
    memFractionStatic: 0.88                 # null = SGLang decides
    maxRunningRequests: 256                 # outer safety bounds; null = SGLang decides
    maxTotalTokens: 900000
    pageSize: null
    disaggregationRole: null                # prefill | decode (PD disaggregation)
    transferBackend: mooncake               # PD KV transfer backend
    device: cuda                            # cuda | cpu (SGLang's CPU backend)
    host: 0.0.0.0
    port: 30000
    scheduler: {}                           # SGLang's admission knobs (kvant_contracts.engine_scheduler)
    lora: null                              # adapter pool (kvant_contracts.lora); null = LoRA off
    engineArgs: []                          # passthrough, validated by SGLang's parser
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from kvant_contracts import engine_scheduler
from kvant_contracts.kv_dtypes import KV_DTYPE_NAMES
from kvant_contracts.lora import LoraEnvelope
from kvant_contracts.weight_formats import FORMATS

DISAGGREGATION_ROLES = ("prefill", "decode")


class Device(StrEnum):
    """Where the engine computes. cuda (the default): on spec.serving.gpu. cpu: SGLang's CPU backend, sized
    by spec.serving.cpu, for Xeon hosts and the local cluster's real engine (FP8 KV cache and FP8 weights
    need a CPU with Intel AMX; INT4 needs CUDA)."""

    CUDA = "cuda"
    CPU = "cpu"


DEVICES: tuple[str, ...] = tuple(device.value for device in Device)


class SpecError(ValueError):
    """The launch spec is invalid; the message names the field and what would be valid."""


@dataclass(frozen=True)
class LaunchSpec:
    """The fields keep the CRD's camelCase names, so a spec file reads like the resource."""

    modelPath: str
    servedModelName: str
    weightsFormat: str
    kvCacheDtype: str = "auto"
    tensorParallel: int = 1
    artifactDigest: str | None = None
    memFractionStatic: float | None = None
    maxRunningRequests: int | None = None
    maxTotalTokens: int | None = None
    pageSize: int | None = None
    disaggregationRole: str | None = None
    transferBackend: str = "mooncake"
    device: str = Device.CUDA.value
    host: str = "0.0.0.0"
    port: int = 30000
    engineArgs: tuple[str, ...] = ()
    # SGLang's admission knobs the model sets, by field name; the rest stay at SGLang's defaults.
    scheduler: dict[str, float] = field(default_factory=dict)
    # The adapter pool every engine of the model reserves; None: LoRA off.
    lora: LoraEnvelope | None = None

    def __post_init__(self) -> None:
        _one_of("weightsFormat", self.weightsFormat, tuple(FORMATS))
        _one_of("kvCacheDtype", self.kvCacheDtype, KV_DTYPE_NAMES)
        _one_of("device", self.device, DEVICES)
        if self.disaggregationRole is not None:
            _one_of("disaggregationRole", self.disaggregationRole, DISAGGREGATION_ROLES)
        for name in ("tensorParallel", "maxRunningRequests", "maxTotalTokens", "pageSize", "port"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        fraction = self.memFractionStatic
        if fraction is not None and not (isinstance(fraction, int | float) and 0 < fraction < 1):
            raise SpecError(
                f"memFractionStatic must be a number between 0 and 1 (exclusive), got {fraction!r}"
            )
        if not all(isinstance(arg, str) for arg in self.engineArgs):
            raise SpecError(f"engineArgs must be a list of strings, got {list(self.engineArgs)!r}")
        if not isinstance(self.scheduler, dict):
            raise SpecError(f"scheduler must be a mapping of knob to value, got {self.scheduler!r}")
        for name, value in self.scheduler.items():
            problem = engine_scheduler.problem(name, value)
            if problem is not None:
                raise SpecError(problem)
        flag = engine_scheduler.CONSERVATIVENESS.sglang
        if engine_scheduler.CONSERVATIVENESS.field in self.scheduler and any(
            arg == flag or arg.startswith(f"{flag}=") for arg in self.engineArgs
        ):
            raise SpecError(f"scheduler.conservativeness is set and engineArgs passes {flag} too: set one")

    def to_json(self) -> str:
        """The `--spec-json` text; `parse_spec_json` reads it back to an equal spec. Fields added after
        the first release are left out at their default: the text is in the engine's pod template, and
        an operator upgrade that changed it would restart every engine it serves."""
        fields_ = {**asdict(self), "engineArgs": list(self.engineArgs), "scheduler": dict(self.scheduler)}
        fields_["lora"] = self.lora.to_json() if self.lora is not None else None
        for name in _ADDED_LATER:
            if fields_[name] == _DEFAULTS[name]:
                del fields_[name]
        return json.dumps(fields_)


# Fields added to the spec after the first release (see to_json).
_ADDED_LATER = ("device", "scheduler", "lora")
_DEFAULTS: dict[str, Any] = {
    f.name: f.default if f.default_factory is MISSING else f.default_factory() for f in fields(LaunchSpec)
}


def load_spec(path: Path) -> LaunchSpec:
    # YAML only for a spec file: the launcher that runs inside a user's SGLang image reads the inline
    # JSON spec with the standard library alone (see kvant_runtime.launch.zipapp).
    import yaml  # noqa: PLC0415

    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise SpecError(f"cannot read the launch spec {path}: {error}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a launch spec is a mapping of fields, got {type(raw).__name__}")
    return spec_from_dict(raw, source=str(path))


def parse_spec_json(text: str) -> LaunchSpec:
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise SpecError(f"--spec-json is not valid JSON: {error}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"--spec-json: a launch spec is a mapping of fields, got {type(raw).__name__}")
    return spec_from_dict(raw, source="--spec-json")


def spec_from_dict(raw: dict[str, Any], source: str = "launch spec") -> LaunchSpec:
    known = {f.name for f in fields(LaunchSpec)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SpecError(
            f"{source}: unknown field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(known))}"
        )
    required = [
        f.name for f in fields(LaunchSpec) if f.name in ("modelPath", "servedModelName", "weightsFormat")
    ]
    missing = [name for name in required if not raw.get(name)]
    if missing:
        raise SpecError(f"{source}: missing required field(s) {', '.join(missing)}")
    values = dict(raw)
    if "engineArgs" in values:
        if not isinstance(values["engineArgs"], list):
            raise SpecError(f"{source}: engineArgs must be a list of strings, got {values['engineArgs']!r}")
        values["engineArgs"] = tuple(values["engineArgs"])
    if values.get("lora") is not None:
        try:
            values["lora"] = LoraEnvelope.from_json(values["lora"], source)
        except ValueError as error:
            raise SpecError(str(error)) from None
    try:
        return LaunchSpec(**values)
    except SpecError as error:
        raise SpecError(f"{source}: {error}") from None


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
