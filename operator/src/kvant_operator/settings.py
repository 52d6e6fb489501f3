"""The operator's own configuration, from environment variables (the chart sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

# Image names match the node agent's image map and the chart's values.
DEFAULT_RUNTIME_IMAGE = "ghcr.io/kvant-dev/kvant-runtime:0.1.0"
DEFAULT_OPERATOR_IMAGE = "ghcr.io/kvant-dev/kvant-operator:0.1.0"


@dataclass(frozen=True)
class OperatorSettings:
    # SGLang plus Kvant's runtime: converter, calibrator, launcher (`kvant launch` execs SGLang),
    # simulator and gate. spec.serving.image may be any SGLang 0.5 image: the launcher reaches it as
    # a zipapp from this image's init container (render/engine_launcher.py).
    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    operator_image: str = DEFAULT_OPERATOR_IMAGE  # also runs `kvant plan` Jobs (no torch needed)
    artifact_pvc: str = "kvant-artifacts"  # where artifacts go when spec.weights.output is unset
    # Conversions split across an Indexed Job: one worker per this many source bytes, at most max.
    conversion_bytes_per_worker: int = 64 * 2**30
    max_conversion_workers: int = 16
    busy_interval: float = 2.0  # seconds between reconciles while work is under way
    idle_interval: float = 30.0  # seconds between reconciles of a settled model
    resync_interval: float = 300.0  # seconds between full re-applies of a settled, unchanged model
    # Each model's NetworkPolicy: namespaces whose pods may reach the serving port (empty: any
    # source), and namespaces (besides the operator's own, whose protection loop scrapes the pods)
    # whose pods may reach the metrics port.
    serving_from: tuple[str, ...] = ()
    metrics_from: tuple[str, ...] = ("monitoring",)
    operator_namespace: str = "kvant-system"
    # Node folders a file:// source may name (a hostPath: whoever may create a QuantizedModel could
    # otherwise mount any folder of the node into a Job). Empty: no file:// source at all.
    file_source_prefixes: tuple[str, ...] = ("/var/lib/kvant/models",)
    # Fetched sources (hf://, s3://): the endpoints a spec may leave out, and the Secret (in the
    # model's namespace) that fetch pods read credentials from when the spec names none. The
    # operator never reads it: only the fetch pod gets it, as environment variables.
    hf_endpoint: str = ""  # empty: huggingface_hub's own default (the Hub)
    s3_endpoint: str = ""  # empty: AWS
    s3_region: str = ""
    source_credentials_secret: str = ""

    @classmethod
    def from_env(cls) -> OperatorSettings:
        defaults = cls()
        return cls(
            runtime_image=os.environ.get("KVANT_RUNTIME_IMAGE", defaults.runtime_image),
            operator_image=os.environ.get("KVANT_OPERATOR_IMAGE", defaults.operator_image),
            artifact_pvc=os.environ.get("KVANT_ARTIFACT_PVC", defaults.artifact_pvc),
            conversion_bytes_per_worker=int(
                os.environ.get("KVANT_CONVERSION_BYTES_PER_WORKER", defaults.conversion_bytes_per_worker)
            ),
            max_conversion_workers=int(
                os.environ.get("KVANT_MAX_CONVERSION_WORKERS", defaults.max_conversion_workers)
            ),
            busy_interval=float(os.environ.get("KVANT_BUSY_INTERVAL", defaults.busy_interval)),
            idle_interval=float(os.environ.get("KVANT_IDLE_INTERVAL", defaults.idle_interval)),
            resync_interval=float(os.environ.get("KVANT_RESYNC_INTERVAL", defaults.resync_interval)),
            serving_from=_names(os.environ.get("KVANT_SERVING_FROM"), defaults.serving_from),
            metrics_from=_names(os.environ.get("KVANT_METRICS_FROM"), defaults.metrics_from),
            operator_namespace=os.environ.get("POD_NAMESPACE", defaults.operator_namespace),
            file_source_prefixes=_names(
                os.environ.get("KVANT_FILE_SOURCE_PREFIXES"), defaults.file_source_prefixes
            ),
            hf_endpoint=os.environ.get("KVANT_HF_ENDPOINT", defaults.hf_endpoint),
            s3_endpoint=os.environ.get("KVANT_S3_ENDPOINT", defaults.s3_endpoint),
            s3_region=os.environ.get("KVANT_S3_REGION", defaults.s3_region),
            source_credentials_secret=os.environ.get(
                "KVANT_SOURCE_CREDENTIALS_SECRET", defaults.source_credentials_secret
            ),
        )


def _names(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list of namespace names; unset keeps the default, empty means none."""
    if value is None:
        return default
    return tuple(name.strip() for name in value.split(",") if name.strip())
