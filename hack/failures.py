"""Prints the failed tests of a pytest JUnit XML report, one block each, after the suite has ended.

`make test` runs it last, so the end of a CI log (often all a CI summary keeps) names every failure
and its assertion, after whatever the interpreter printed while it shut down (Triton's nanobind
prints some forty lines of reference leaks at exit, which had pushed pytest's own summary out of a
CI run's tail: one of three failures was named, the others' causes were lost).
"""

from __future__ import annotations

import sys
from pathlib import Path
from xml.etree import ElementTree

LINES_PER_FAILURE = 6


def failures(report: Path) -> list[str]:
    """One block per failed or errored test case: its id, then the first lines of its message."""
    blocks = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            message = (found.get("message") or found.text or "").strip().splitlines()
            blocks.append("\n".join([f"{outcome.upper()} {name}", *message[:LINES_PER_FAILURE]]))
    return blocks


def report_failures(reports: list[Path]) -> None:
    """Prints every failure of every report, or that a report is missing or unreadable."""
    blocks: list[str] = []
    for report in reports:
        if not report.is_file():
            print(f"[failures] no report at {report}: pytest ended before writing it")
            continue
        try:
            blocks += failures(report)
        except ElementTree.ParseError as error:
            print(f"[failures] the report at {report} is not XML: {error}")
    print(f"[failures] {len(blocks)} failed:" if blocks else "[failures] none")
    for block in blocks:
        print(block)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: failures.py JUNIT_XML...", file=sys.stderr)
        return 2
    report_failures([Path(arg) for arg in argv])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
