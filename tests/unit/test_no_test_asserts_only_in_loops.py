"""No test asserts only inside a loop.

A test whose every assert sits in a `for`/`while` body passes silently when the loop's iterable
is empty: a renamed file, a changed selector or an empty render turns the test into a no-op that
still reports green. Each such test must also be able to fail outside its loops, usually by
asserting first that the collection it walks is non-empty.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ASSERTION_PREFIXES = ("assert_", "check_", "expect_")
FAILING_CONTEXTS = {"raises", "warns"}


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_assertion_call(call: ast.Call) -> bool:
    """`pytest.fail(...)` or a helper named `assert_*`, `check_*` or `expect_*` (leading `_` allowed)."""
    name = _called_name(call)
    return name == "fail" or name.lstrip("_").startswith(ASSERTION_PREFIXES)


def _is_non_empty_literal(node: ast.expr) -> bool:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    return False


def _literal_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the function binds exactly once, to a non-empty literal (`sources = {"a": ..., "b": ...}`)."""
    names = [node for node in ast.walk(function) if isinstance(node, ast.Name)]
    stores = Counter(name.id for name in names if isinstance(name.ctx, ast.Store))
    return {
        target.id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and _is_non_empty_literal(node.value)
        for target in node.targets
        if isinstance(target, ast.Name) and stores[target.id] == 1
    }


def _cannot_be_empty(node: ast.For | ast.AsyncFor | ast.While, literal_names: set[str]) -> bool:
    """A loop whose body runs at least once: over a non-empty literal (or a name bound only to one,
    or its `.items()`, `.keys()`, `.values()`), a constant non-empty range(), or `while True`."""
    if isinstance(node, ast.While):
        return isinstance(node.test, ast.Constant) and bool(node.test.value)
    it = node.iter
    if isinstance(it, ast.Call) and not it.args and _called_name(it) in {"items", "keys", "values"}:
        it = it.func.value if isinstance(it.func, ast.Attribute) else it
    if isinstance(it, ast.Name):
        return it.id in literal_names
    if isinstance(it, ast.Call) and _called_name(it) == "range" and not it.keywords:
        bounds = [a.value for a in it.args if isinstance(a, ast.Constant) and type(a.value) is int]
        return 0 < len(bounds) == len(it.args) and len(range(*bounds)) > 0
    return _is_non_empty_literal(it)


class _AssertionFinder(ast.NodeVisitor):
    """Counts the ways a function can fail, split by whether they sit in a loop that may not run."""

    def __init__(self, literal_names: set[str]) -> None:
        self.literal_names = literal_names
        self.depth = 0
        self.in_loop = 0
        self.outside = 0

    def _record(self) -> None:
        if self.depth:
            self.in_loop += 1
        else:
            self.outside += 1

    def visit_Assert(self, node: ast.Assert) -> None:
        self._record()
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_assertion_call(node):
            self._record()
        self.generic_visit(node)

    def _visit_with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            ctx = item.context_expr
            if isinstance(ctx, ast.Call) and _called_name(ctx) in FAILING_CONTEXTS:
                self._record()
        self.generic_visit(node)

    visit_With = _visit_with
    visit_AsyncWith = _visit_with

    def _visit_loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        # The iterable (or condition) and the `else:` run even when the body does not.
        header: ast.expr = node.test if isinstance(node, ast.While) else node.iter
        self.visit(header)
        inner = 0 if _cannot_be_empty(node, self.literal_names) else 1
        self.depth += inner
        for statement in node.body:
            self.visit(statement)
        self.depth -= inner
        for statement in node.orelse:
            self.visit(statement)

    visit_For = _visit_loop
    visit_AsyncFor = _visit_loop
    visit_While = _visit_loop


def _test_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level `test_*` functions and those in classes, in source order."""
    candidates = [
        member for node in tree.body for member in (node.body if isinstance(node, ast.ClassDef) else [node])
    ]
    return [
        node
        for node in candidates
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
    ]


def loop_only_tests(source: str) -> list[tuple[str, int]]:
    """The (name, line) of each test function, nested function bodies included, that can only fail
    inside a loop that may run zero times: on an empty collection it passes without checking anything."""
    offenders = []
    for function in _test_functions(ast.parse(source)):
        finder = _AssertionFinder(_literal_names(function))
        for statement in function.body:
            finder.visit(statement)
        if finder.in_loop and not finder.outside:
            offenders.append((function.name, function.lineno))
    return offenders


def test_no_test_can_pass_by_looping_over_nothing() -> None:
    files = sorted(p for top in ("tests", "e2e") for p in (ROOT / top).rglob("test_*.py"))
    assert len(files) > 100, f"found only {len(files)} test files under tests/ and e2e/"
    offenders = [
        f"{path.relative_to(ROOT)}::{name} (line {line})"
        for path in files
        for name, line in loop_only_tests(path.read_text())
    ]
    assert not offenders, (
        "these tests assert only inside loops, so an empty collection passes them; "
        "assert it is non-empty first:\n" + "\n".join(offenders)
    )


LOOP_ONLY = """
import asyncio

def test_loop_only(rules):
    for rule in rules:
        assert rule.ok

class TestNested:
    def test_inner_scenario(self, items):
        async def scenario():
            async for item in items:
                assert item
        asyncio.run(scenario())

def test_helper_in_loop(rows):
    while rows:
        check_row(rows.pop())

def test_name_rebound(rows):
    sources = [1]
    sources = rows
    for source in sources:
        assert source
"""

GUARDED = """
import pytest

def test_guarded(rules):
    assert rules, "no rules"
    for rule in rules:
        assert rule.ok

def test_literal_iterable():
    for n in (1, 2):
        assert n

def test_constant_range():
    for n in range(3):
        assert n >= 0

def test_raises_outside(rules):
    with pytest.raises(ValueError):
        parse("")
    for rule in rules:
        assert rule.ok

def test_helper_outside(rules):
    assert_loaded(rules)
    for rule in rules:
        assert rule.ok

def test_for_else(rules):
    for rule in rules:
        assert rule.ok
    else:
        assert rules, "the else: of a loop runs even when the loop does not"

def test_name_bound_to_a_literal():
    sources = {"a": 1, "b": 2}
    for name, value in sources.items():
        assert value, name

def test_no_asserts_at_all(rules):
    for rule in rules:
        print(rule)
"""


def test_the_checker_flags_loop_only_tests_and_passes_guarded_ones() -> None:
    assert loop_only_tests(LOOP_ONLY) == [
        ("test_loop_only", 4),
        ("test_inner_scenario", 9),
        ("test_helper_in_loop", 15),
        ("test_name_rebound", 19),
    ]
    assert loop_only_tests(GUARDED) == []
