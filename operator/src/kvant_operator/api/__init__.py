"""The QuantizedModel API (kvant.dev/v1alpha1): typed models, their rules, and the CRD built from them."""

from kvant_operator.api.resource import API_VERSION, CRD_NAME, GROUP, KIND, PLURAL, VERSION, QuantizedModel
from kvant_operator.api.rules import SpecError
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import QuantizedModelStatus

__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "QuantizedModel",
    "QuantizedModelSpec",
    "QuantizedModelStatus",
    "SpecError",
]
