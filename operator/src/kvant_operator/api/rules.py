"""Validation rules defined once and enforced twice: by the API server as CEL and by the models in Python.

A rule lives on the model of the lowest node that holds every field it reads. The CRD generator
copies its CEL into `x-kubernetes-validations`; the model checks its Python mirror after parsing, so
`kvant render`, the operator and `kubectl apply` reject the same resource with the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema


@dataclass(frozen=True)
class Rule:
    """A cross-field rule. `message` names the field and says what would be valid."""

    cel: str
    message: str
    field_path: str
    holds: Callable[[Any], bool]
    reason: str = "FieldValueInvalid"

    def schema(self) -> dict[str, str]:
        return {
            "rule": self.cel,
            "message": self.message,
            "fieldPath": self.field_path,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class TransitionRule:
    """A rule comparing a node with its previous value (CEL `oldSelf`), checked only on update."""

    cel: str
    message: str
    holds: Callable[[Any, Any], bool]
    reason: str = "FieldValueForbidden"

    def schema(self) -> dict[str, str]:
        return {"rule": self.cel, "message": self.message, "reason": self.reason}


class SpecError(ValueError):
    """A resource that the API server would reject; the message is the rule's message."""


class ApiModel(BaseModel):
    """Base of every QuantizedModel node: camelCase on the wire, unknown fields rejected, rules enforced."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=False
    )

    rules: ClassVar[tuple[Rule, ...]] = ()
    transition_rules: ClassVar[tuple[TransitionRule, ...]] = ()

    @model_validator(mode="after")
    def _enforce_rules(self) -> Self:
        for rule in type(self).rules:
            if not rule.holds(self):
                raise SpecError(rule.message)
        return self

    def check_transition(self, old: Self) -> None:
        """Raises SpecError when replacing `old` by `self` breaks a transition rule of this node."""
        for rule in type(self).transition_rules:
            if not rule.holds(old, self):
                raise SpecError(rule.message)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        rules = [r.schema() for r in cls.rules] + [r.schema() for r in cls.transition_rules]
        if rules:
            handler.resolve_ref_schema(json_schema)["x-kubernetes-validations"] = rules
        return json_schema
