"""The QuantizedModel resource: its names in the API and the whole object as a model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kvant_operator.api.rules import ApiModel
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import QuantizedModelStatus

GROUP = "kvant.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "QuantizedModel"
PLURAL = "quantizedmodels"
SINGULAR = "quantizedmodel"
SHORT_NAMES = ("qm",)
CATEGORIES = ("kvant",)
CRD_NAME = f"{PLURAL}.{GROUP}"


class QuantizedModel(ApiModel):
    """A model served quantized on SGLang, with typed KV cache and live concurrency limits."""

    api_version: Literal["kvant.dev/v1alpha1"] = Field(default="kvant.dev/v1alpha1", alias="apiVersion")
    kind: Literal["QuantizedModel"] = "QuantizedModel"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: QuantizedModelSpec
    status: QuantizedModelStatus | None = None

    def to_manifest(self) -> dict[str, Any]:
        """The object as it is written to the API server: camelCase, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
