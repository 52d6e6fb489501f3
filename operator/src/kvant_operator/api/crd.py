"""Generates the QuantizedModel CustomResourceDefinition from the API models.

Pydantic writes JSON Schema (2020-12); a CRD needs a structural OpenAPI v3 schema. The translation:
references are inlined, optional fields lose their `null` branch (the API server prunes nulls),
numeric exclusive bounds become OpenAPI 3.0 booleans, titles go, and an object whose model default
is built from its own defaults gets `default: {}` so the API server fills it in like the models do.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from kvant_operator.api.resource import (
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import QuantizedModelStatus

Schema = dict[str, Any]

HEADER = (
    "# Generated from kvant_operator.api by `kvant crd --output crds/quantizedmodels.kvant.dev.yaml`.\n"
    "# Do not edit: change the models and regenerate.\n"
)
_DROPPED_KEYS = frozenset({"title", "$defs"})

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Format", "type": "string", "jsonPath": ".spec.weights.format"},
    {"name": "KV-Dtype", "type": "string", "jsonPath": ".spec.kvCache.dtype"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Concurrency", "type": "integer", "jsonPath": ".status.protection.effectiveConcurrency"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def model_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of one model, as the CRD carries it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def _structural(node: Schema, defs: dict[str, Schema]) -> Schema:
    node = _inline(node, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or (key == "additionalProperties" and not isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = _properties(value, set(node.get("required", [])), defs)
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    return _ordered(out)


def _inline(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Resolves `$ref` and drops the `null` branch of an optional field, keeping sibling keys."""
    node = dict(node)
    branches = node.pop("anyOf", None)
    if branches is not None:
        kept = [b for b in branches if b.get("type") != "null"]
        if len(kept) != 1:
            raise ValueError(f"cannot express a union of {len(kept)} types in a structural schema: {kept}")
        node = {**kept[0], **node}
        if node.get("default", ...) is None:
            del node["default"]
    ref = node.pop("$ref", None)
    if ref is not None:
        target = _inline(defs[ref.rsplit("/", 1)[-1]], defs)
        # The type's docstring says what it is; the field's description adds what is particular to it.
        described = " ".join(d for d in (target.get("description"), node.get("description")) if d)
        node = {**target, **node}
        if described:
            node["description"] = described
    return _ordered(node)


_FIRST = ("type", "description", "default", "enum", "format")
_LAST = ("required", "properties", "items", "additionalProperties", "x-kubernetes-validations")


def _ordered(node: Schema) -> Schema:
    """Keys in reading order: what it is first, its children last."""
    middle = sorted(k for k in node if k not in _FIRST and k not in _LAST)
    return {k: node[k] for k in (*_FIRST, *middle, *_LAST) if k in node}


def _properties(props: dict[str, Schema], required: set[str], defs: dict[str, Schema]) -> Schema:
    out: Schema = {}
    for name, raw in props.items():
        prop = _structural(raw, defs)
        # A default-constructed sub-object: `{}` lets the API server apply the nested defaults.
        if (
            name not in required
            and "default" not in raw
            and "anyOf" not in raw
            and prop.get("type") == "object"
        ):
            prop = _ordered({**prop, "default": {}})
        out[name] = prop
    return out


SCALE = {
    "specReplicasPath": ".spec.serving.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def crd() -> Schema:
    """The CustomResourceDefinition as a plain object."""
    schema: Schema = {
        "type": "object",
        "description": "A model served quantized on SGLang, with typed KV cache and live concurrency limits.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(QuantizedModelSpec),
            "status": model_schema(QuantizedModelStatus),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "kvant"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    # scale: kubectl scale and HorizontalPodAutoscalers drive spec.serving.replicas.
                    "subresources": {"status": {}, "scale": SCALE},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated values in full: a CRD reader should never chase YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd_yaml() -> str:
    body = yaml.dump(crd(), Dumper=_PlainDumper, sort_keys=False, width=110, allow_unicode=True)
    return HEADER + body
