"""The model-I/O room (#41), read from the imports: `convert`, `gptq`, `calibrate` and `evaluate` stand
on `kvant_runtime.checkpoint` and do not reach sideways into each other; the one edge among them is
`convert` -> `gptq` (GPTQ is the converter's rounding method, and it takes the recipe as a protocol, so
the edge runs one way); and no modules of the runtime or the kernels import each other in a circle.

Every import counts: module level, inside functions, and under TYPE_CHECKING (a circle of types is
still a circle to the reader).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime/src/kvant_runtime"
KERNELS = ROOT / "kernels/src/kvant_kernels"
ROOMS = ("convert", "gptq", "calibrate", "evaluate")
ALLOWED_BETWEEN_ROOMS = {("convert", "gptq")}


def module_graph(package_dir: Path) -> dict[str, set[str]]:
    """Each module of the package (dotted name) and the modules of the same package it imports."""
    modules: dict[str, Path] = {}
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {target for target in named if target in modules and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start, first in graph.items():
        if start in index:
            continue
        work = [(start, iter(sorted(first)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(graph[successor]))))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in (*ROOMS, "checkpoint") else None


def room_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (source, target)
        for module, imported in graph.items()
        for other in imported
        if (source := _room(module)) and (target := _room(other)) and source != target
    }


def test_the_rooms_stand_on_checkpoint_and_not_on_each_other() -> None:
    edges = room_edges(module_graph(RUNTIME))
    assert edges, "no imports found: the graph reader is broken"
    between = {(a, b) for a, b in edges if a in ROOMS and b in ROOMS}
    assert between == ALLOWED_BETWEEN_ROOMS
    assert {(room, "checkpoint") for room in ROOMS} <= edges
    assert not {(a, b) for a, b in edges if a == "checkpoint"}, "checkpoint imports a room above it"


def test_no_circle_in_the_runtime_or_the_kernels() -> None:
    for package in (RUNTIME, KERNELS):
        graph = module_graph(package)
        assert len(graph) > 5 and any(graph.values()), package
        assert circles(graph) == [], package


def test_the_checks_see_a_sideways_import_and_a_circle() -> None:
    """The two checks on small made-up graphs: a calibrate module reaching into convert, and the
    int4 <-> int4_kernel circle the kernels had."""
    sideways = {"kvant_runtime.calibrate.x": {"kvant_runtime.convert.y"}, "kvant_runtime.convert.y": set()}
    assert room_edges(sideways) == {("calibrate", "convert")}
    circle = {"k.int4": {"k.int4_kernel"}, "k.int4_kernel": {"k.int4", "k.bits"}, "k.bits": set()}
    assert circles(circle) == [["k.int4", "k.int4_kernel"]]
