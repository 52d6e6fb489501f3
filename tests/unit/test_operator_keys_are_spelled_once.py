"""Every label and annotation key of the operator is written once, in kvant_operator.object_keys, and
the content hash once, in kvant_operator.hashing: both on the operator's bottom floor, importing
nothing of the operator, so renderers and reconcile steps take them from below (#41)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator/src/kvant_operator"
# Kvant's own keys (not its API group's versions), and the one Kubernetes annotation it writes.
KEY = re.compile(r"^(?:kvant\.dev/(?!v\d)[a-z][a-z0-9-]*|controller\.kubernetes\.io/[a-z-]+)$")
NOT_A_KEY = {"kvant.dev/operator"}  # the Event API's reporting component (kube.py), not a label
BOTTOM_FLOOR = ("object_keys.py", "hashing.py")


def keys_outside_their_home(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "object_keys.py":
            continue
        found += [
            f"{path.relative_to(root)}:{node.lineno}: {node.value}"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and KEY.match(node.value)
            and node.value not in NOT_A_KEY
        ]
    return found


def test_label_and_annotation_keys_are_spelled_only_in_object_keys() -> None:
    assert keys_outside_their_home(OPERATOR) == []


def test_the_bottom_floor_imports_nothing_of_the_operator() -> None:
    imports = {}
    for name in BOTTOM_FLOOR:
        tree = ast.parse((OPERATOR / name).read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imports[name] = imported + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ]
    assert sorted(imports) == sorted(BOTTOM_FLOOR) and all(imports.values()), imports
    assert {
        name: [m for m in found if m.startswith("kvant_operator")] for name, found in imports.items()
    } == {name: [] for name in BOTTOM_FLOOR}


def test_the_check_finds_a_new_copy(tmp_path: Path) -> None:
    (tmp_path / "renderer.py").write_text('LABEL = "kvant.dev/model"\nOTHER = "kvant.dev/operator"\n')
    assert keys_outside_their_home(tmp_path) == ["renderer.py:1: kvant.dev/model"]
