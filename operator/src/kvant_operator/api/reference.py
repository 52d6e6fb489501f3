"""The CRD reference in Markdown, generated from the same schema the API server validates against."""

from __future__ import annotations

from typing import Any

from kvant_operator.api.crd import Schema, crd
from kvant_operator.api.resource import API_VERSION, KIND

INTRO = f"""# {KIND} reference ({API_VERSION})

Generated from `kvant_operator.api` by `kvant crd --reference`; do not edit.
Short name `qm`, category `kvant`. Every rule below is enforced by the API server at `kubectl apply`
and by the operator's models, with the same message.
"""


def reference_markdown() -> str:
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    sections = [INTRO]
    for name in ("spec", "status"):
        sections.extend(_sections(name, root[name]))
    return "\n".join(sections)


def _sections(path: str, schema: Schema) -> list[str]:
    """One section per object: its fields, then its rules; nested objects follow in field order."""
    required = set(schema.get("required", []))
    properties: dict[str, Schema] = schema.get("properties", {})
    lines = [f"## `{path}`", "", schema.get("description", ""), ""]
    lines += ["| Field | Type | Default | Description |", "|---|---|---|---|"]
    for field, prop in properties.items():
        name = f"`{field}`" + (" (required)" if field in required else "")
        lines.append(
            f"| {name} | {_type(prop)} | {_default(prop)} | {_escape(prop.get('description', ''))} |"
        )
    rules = schema.get("x-kubernetes-validations", [])
    if rules:
        lines += ["", "Rules:", ""]
        lines += [f"- `{_escape(r['rule'])}` — {_escape(r['message'])}" for r in rules]
    lines.append("")
    children: list[str] = []
    for field, prop in properties.items():
        target = prop.get("items", prop) if prop.get("type") == "array" else prop
        if target.get("type") == "object" and "properties" in target:
            children.extend(_sections(f"{path}.{field}" + ("[]" if target is not prop else ""), target))
    return ["\n".join(lines), *children]


def _type(prop: Schema) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = str(prop.get("type", "object"))
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object" and "additionalProperties" in prop:
        return f"map of {_type(prop['additionalProperties'])}"
    bounds = _bounds(prop)
    return f"{kind}{' ' + bounds if bounds else ''}"


def _bounds(prop: Schema) -> str:
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is None and high is None:
        return ""
    left = "(" if prop.get("exclusiveMinimum") else "["
    return f"{left}{'' if low is None else low}, {'' if high is None else high}]"


def _default(prop: Schema) -> str:
    value: Any = prop.get("default")
    return "" if value is None else f"`{value}`"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
