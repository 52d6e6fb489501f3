"""The commands the docs tell people to type are real: every `kvant ...` line of a shell block is
parsed by the `kvant` CLI's own argument parser, and every `make ...` line names targets that the
Makefile defines.

Shell blocks are fenced ```bash, ```sh, ```shell (every line) and ```console (the lines after a `$ `
prompt). The pages of docs/ are all read (the getting-started pages and the tour must have such
lines), and so is the README.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from kvant_cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
GETTING_STARTED = ROOT / "docs" / "getting-started"
MUST_HAVE_COMMANDS = [GETTING_STARTED / "index.md", GETTING_STARTED / "tour.md"]
_FENCE = re.compile(r"^```(\w*)\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _shell_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, command) for each command line of the page's shell blocks, continuations joined."""
    lines: list[tuple[int, str]] = []
    language: str | None = None
    pending: tuple[int, str] | None = None
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        fence = _FENCE.match(line.strip())
        if fence:
            language = None if language is not None else fence.group(1)
            continue
        if language not in ("bash", "sh", "shell", "console"):
            continue
        text = line.strip()
        if pending is None:
            if language == "console":
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            pending = (number, "")
        pending = (pending[0], f"{pending[1]} {text.removesuffix(chr(92))}".strip())
        if not text.endswith("\\"):
            lines.append(pending)
            pending = None
    return lines


def _words(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    while words and _ASSIGNMENT.match(words[0]):  # VAR=value before the command
        words.pop(0)
    return words


def _commands(program: str) -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for number, line in _shell_lines(page):
            words = _words(line)
            if words and words[0] == program:
                found.append((f"{page.relative_to(ROOT)}:{number}: {line}", words[1:]))
    return found


def _makefile_targets() -> set[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        rule = re.match(r"^([A-Za-z0-9_.\-][A-Za-z0-9_.\- ]*):(?!=)", line)
        if rule and not line.startswith(("\t", ".")):
            targets.update(rule.group(1).split())
    return targets


@pytest.mark.parametrize("page", MUST_HAVE_COMMANDS, ids=lambda p: p.name)
def test_the_getting_started_pages_have_commands_to_check(page: Path) -> None:
    firsts = {words[0] for _, line in _shell_lines(page) if (words := _words(line))}
    assert firsts & {"kvant", "make"}, f"{page.relative_to(ROOT)}: no kvant or make line"


def test_the_tour_runs_kvant_and_make() -> None:
    tour = [words for page in MUST_HAVE_COMMANDS for _, line in _shell_lines(page) if (words := _words(line))]
    assert any(w[0] == "kvant" for w in tour)
    assert any(w[:2] == ["make", "demo"] for w in tour)
    assert any(w[:2] == ["make", "test"] for w in tour)


def test_every_kvant_line_parses_with_the_real_cli_parser() -> None:
    parser = build_parser()
    commands = _commands("kvant")
    assert commands
    for where, argv in commands:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(argv)
        except SystemExit as exit_:
            if exit_.code not in (0, None):  # --help exits 0
                pytest.fail(f"{where}\n  does not parse: {stderr.getvalue().strip()}")
        except argparse.ArgumentError as error:
            pytest.fail(f"{where}\n  does not parse: {error}")


def test_every_make_line_names_targets_of_the_makefile() -> None:
    targets = _makefile_targets()
    assert {"demo", "test"} <= targets
    commands = _commands("make")
    assert commands
    for where, args in commands:
        named = [a for a in args if not a.startswith("-") and "=" not in a]
        assert named, f"{where}\n  names no target"
        missing = [t for t in named if t not in targets]
        assert not missing, f"{where}\n  names {missing}, not targets of the Makefile ({sorted(targets)})"
