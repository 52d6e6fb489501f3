"""The contributing guide's list of contracts is the package: every module of `kvant_contracts` is named
in its `contracts/` row, so the inventory a newcomer reads cannot fall behind the code (it did: 15 of
18 were listed)."""

from __future__ import annotations

import re
from pathlib import Path

import kvant_contracts

ROOT = Path(__file__).resolve().parents[2]


def _contracts_row() -> str:
    rows = [
        line
        for line in (ROOT / "docs/contributing.md").read_text().splitlines()
        if line.startswith("| `contracts/`")
    ]
    assert len(rows) == 1, "docs/contributing.md has no single `contracts/` row in its layout table"
    return rows[0]


def test_every_contract_module_is_in_the_contributing_guide() -> None:
    package = Path(kvant_contracts.__file__).parent
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert len(modules) >= 18, modules  # the package as it stands: a broken glob cannot pass
    named = set(re.findall(r"`([a-z_0-9]+)`", _contracts_row()))
    assert modules <= named, f"contracts not in docs/contributing.md: {sorted(modules - named)}"
