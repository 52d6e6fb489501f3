"""The generated CRD: structural, carries every model rule, and names what `kubectl get qm` shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvant_operator.api import placement as placement_models
from kvant_operator.api import spec as spec_models
from kvant_operator.api.crd import crd
from kvant_operator.api.rules import ApiModel

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "const", "title"}


def version() -> dict[str, Any]:
    found: dict[str, Any] = crd()["spec"]["versions"][0]
    return found


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from walk(prop, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    root = version()["schema"]["openAPIV3Schema"]
    assert root.get("properties"), "the CRD's openAPIV3Schema has no fields to check"
    for path, node in walk(root):
        assert "type" in node, f"{path} has no type"
        assert not FORBIDDEN_KEYS & node.keys(), f"{path} has {FORBIDDEN_KEYS & node.keys()}"
        assert not isinstance(node.get("additionalProperties"), bool), f"{path}: additionalProperties: bool"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_every_rule_points_at_an_existing_field():
    root = version()["schema"]["openAPIV3Schema"]
    assert any(node.get("x-kubernetes-validations") for _, node in walk(root)), "the CRD carries no rules"
    for path, node in walk(root):
        for rule in node.get("x-kubernetes-validations", []):
            target = node
            for part in rule.get("fieldPath", "").strip(".").split(".") if "fieldPath" in rule else []:
                assert part in target.get("properties", {}), f"{path}: fieldPath {rule['fieldPath']} missing"
                target = target["properties"][part]
            assert "spec." in rule["message"], f"{path}: message must name the field: {rule['message']}"


def test_every_model_rule_is_in_the_crd():
    # Every module that declares QuantizedModel nodes (spec.py imports the others' roots).
    declared = {**vars(spec_models), **vars(placement_models)}
    models = [m for m in declared.values() if isinstance(m, type) and issubclass(m, ApiModel)]
    assert placement_models.Toleration in models
    expected = {r.cel for m in models for r in m.rules} | {r.cel for m in models for r in m.transition_rules}
    root = version()["schema"]["openAPIV3Schema"]
    found = {r["rule"] for _, node in walk(root) for r in node.get("x-kubernetes-validations", [])}
    assert expected == found


def test_source_is_immutable_and_defaults_fill_nested_objects():
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf"}.items() <= spec["properties"]["source"]["x-kubernetes-validations"][
        -1
    ].items()
    assert spec["properties"]["kvCache"]["default"] == {}
    assert spec["properties"]["kvCache"]["properties"]["dtype"]["default"] == "fp8_e4m3"
    assert "default" not in spec["properties"]["weights"]["properties"]["groupSize"], (
        "groupSize must not be defaulted by the API server, or bf16 weights would be rejected"
    )


def test_names_subresources_and_printer_columns():
    names = crd()["spec"]["names"]
    assert names["shortNames"] == ["qm"] and names["categories"] == ["kvant"]
    assert version()["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.serving.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    columns = {c["name"]: c["jsonPath"] for c in version()["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Format": ".spec.weights.format",
        "KV-Dtype": ".spec.kvCache.dtype",
        "Ready": ".status.readyReplicas",
        "Concurrency": ".status.protection.effectiveConcurrency",
        "Age": ".metadata.creationTimestamp",
    }
    status = version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for column in columns.values():
        head, *rest = column.strip(".").split(".")
        if head in ("spec", "status"):
            node = version()["schema"]["openAPIV3Schema"]["properties"][head]
            for part in rest:
                node = node["properties"][part]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_lists_and_strings_under_rules_are_bounded():
    """The API server estimates CEL cost from maxItems and maxLength; unbounded ones blow the budget."""
    root = version()["schema"]["openAPIV3Schema"]
    assert any(node.get("type") == "array" for _, node in walk(root)), "the CRD schema has no lists to check"
    for path, node in walk(root):
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path} has no maxItems"
            if node["items"].get("type") == "string":
                assert "maxLength" in node["items"], f"{path}[] has no maxLength"
