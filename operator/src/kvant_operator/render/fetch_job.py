"""The fetch Job of a fetched source (hf://, s3://), and the record that says a fetch is published.

One Job per fetch request (URI, revision, endpoint, patterns), named by its key and attempt and owned
by every model that asked for it, like the artifact Jobs. It writes to the sources folder of the
artifacts volume, where each revision has one content-addressed folder (`kvant fetch`). Credentials
reach only this pod: the Secret is mounted as environment variables, and the operator never reads it.
The record ConfigMap has no owner: a fetched source outlives the models that fetched it.
"""

from __future__ import annotations

import json
from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import SourceStatus
from kvant_operator.artifact_recipe import ARTIFACT_MOUNT
from kvant_operator.hashing import digest
from kvant_operator.object_keys import ATTEMPT_ANNOTATION, SOURCE_LABEL
from kvant_operator.render.jobs import job_object
from kvant_operator.render.meta import object_meta, owner_reference, record_configmap
from kvant_operator.settings import OperatorSettings

SOURCES_FOLDER = "sources"  # on the artifacts volume
RECORD_PREFIX = "kvant-source-"
RECORD_KEY = "source.json"


def fetch_request(spec: QuantizedModelSpec, settings: OperatorSettings) -> dict[str, Any]:
    """What decides the fetched bytes; models with the same request share one fetch."""
    source = spec.source
    s3 = source.s3
    return {
        "uri": source.uri,
        "revision": source.revision,
        "hfEndpoint": settings.hf_endpoint if source.uri.startswith("hf://") else None,
        "s3Endpoint": (s3.endpoint if s3 and s3.endpoint else settings.s3_endpoint)
        if source.uri.startswith("s3://")
        else None,
        "s3Region": (s3.region if s3 and s3.region else settings.s3_region)
        if source.uri.startswith("s3://")
        else None,
        "allowPatterns": list(source.allow_patterns or []),
    }


def fetch_key(spec: QuantizedModelSpec, settings: OperatorSettings) -> str:
    return digest(fetch_request(spec, settings))


def fetch_job_name(key: str, attempt: int) -> str:
    return f"kvant-fetch-{key}-{attempt}"


def fetch_args(spec: QuantizedModelSpec, settings: OperatorSettings, key: str) -> list[str]:
    request = fetch_request(spec, settings)
    args = ["fetch", request["uri"], f"{ARTIFACT_MOUNT}/{SOURCES_FOLDER}", "--staging-id", key]
    for flag, field in (
        ("--revision", "revision"),
        ("--hf-endpoint", "hfEndpoint"),
        ("--s3-endpoint", "s3Endpoint"),
        ("--s3-region", "s3Region"),
    ):
        if request[field]:
            args += [flag, request[field]]
    for pattern in request["allowPatterns"]:
        args += ["--allow-pattern", pattern]
    return args


def fetch_job(
    bodies: list[Obj], spec: QuantizedModelSpec, settings: OperatorSettings, key: str, attempt: int
) -> Obj:
    meta = object_meta(bodies[0], fetch_job_name(key, attempt), "fetch")
    meta["labels"][SOURCE_LABEL] = key
    meta["ownerReferences"] = [
        owner_reference(b, controller=False) for b in bodies if b["metadata"].get("uid")
    ]
    meta["annotations"] = {ATTEMPT_ANNOTATION: str(attempt)}
    secret = spec.source.credentials_secret or settings.source_credentials_secret
    container: Obj = {
        "name": "fetch",
        "image": settings.runtime_image,
        "command": ["kvant"],
        "args": fetch_args(spec, settings, key),
        "env": [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}],
        "volumeMounts": [{"name": "artifacts", "mountPath": ARTIFACT_MOUNT}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
    }
    if secret:
        # A Secret the spec names must exist (the pod waits, visibly); the chart's default may not.
        optional = not spec.source.credentials_secret
        container["envFrom"] = [{"secretRef": {"name": secret, "optional": optional}}]
    volume = {"name": "artifacts", "persistentVolumeClaim": {"claimName": settings.artifact_pvc}}
    # Pod restarts resume from the partial files on the volume, so a few are cheap; a failure that
    # another pod would repeat (`kvant fetch` exits 2: a token, a missing object) fails the Job at
    # once, and a pod evicted from its node does not count.
    job = job_object(meta, [container], [volume], backoff_limit=3)
    job["spec"]["podFailurePolicy"] = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "fetch", "operator": "In", "values": [2]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]
    }
    return job


def source_location(settings: OperatorSettings, folder: str) -> str:
    return f"pvc://{settings.artifact_pvc}/{SOURCES_FOLDER}/{folder.strip('/')}"


def record_name(key: str) -> str:
    return RECORD_PREFIX + key


def source_record(body: Obj, key: str, source: SourceStatus) -> Obj:
    payload = (RECORD_KEY, source.model_dump_json(by_alias=True))
    return record_configmap(body, record_name(key), "source-record", (SOURCE_LABEL, key), payload)


def read_source_record(record: Obj) -> SourceStatus:
    return SourceStatus.model_validate(json.loads(record["data"][RECORD_KEY]))
