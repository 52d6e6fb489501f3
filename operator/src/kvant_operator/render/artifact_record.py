"""The artifact record: a ConfigMap per artifact key that says a published artifact exists, and what it is.

It has no owner on purpose: the record outlives the models that made it, so a re-created model with
the same recipe finds it and reuses the artifact instead of converting again.
"""

from __future__ import annotations

import json

from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import ArtifactStatus
from kvant_operator.object_keys import ARTIFACT_LABEL
from kvant_operator.render.meta import record_configmap

RECORD_PREFIX = "kvant-artifact-"
RECORD_KEY = "artifact.json"


def record_name(key: str) -> str:
    return RECORD_PREFIX + key


def artifact_record(body: Obj, key: str, artifact: ArtifactStatus) -> Obj:
    payload = (RECORD_KEY, artifact.model_dump_json(by_alias=True))
    return record_configmap(body, record_name(key), "artifact-record", (ARTIFACT_LABEL, key), payload)


def read_record(record: Obj) -> ArtifactStatus:
    return ArtifactStatus.model_validate(json.loads(record["data"][RECORD_KEY]))
