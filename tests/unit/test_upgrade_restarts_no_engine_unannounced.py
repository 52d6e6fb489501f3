"""An operator upgrade restarts engines only when the changelog says so.

Kubernetes rolls a Deployment whenever its pod template changes by one byte, so a new operator that
renders a serving pod even slightly differently restarts every engine in the fleet, minutes without
a replica per model. The serving pod templates of every shipped example are kept per release
(golden/releases/<version>/, one file per example, Deployment name → pod template). The current
rendering must equal golden/releases/unreleased/; where that differs from the last release, the
changelog's Unreleased section must say "Upgrading restarts engines because ...". So a template
change fails here until the golden file and the changelog are updated together.

Set KVANT_UPDATE_GOLDEN=1 to rewrite golden/releases/unreleased/ after an intended change (then add
the changelog line). At a release, rename unreleased/ to the version.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from kvant_operator.render.router import router_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, spec_of
from tests.unit.test_render_golden_objects import _render

ROOT = Path(__file__).resolve().parents[2]
RELEASES = Path(__file__).parent / "golden" / "releases"
UNRELEASED = "unreleased"
CHANGELOG = ROOT / "CHANGELOG.md"
EXAMPLES = (
    "tiny.yaml",
    "tiny-from-s3.yaml",
    "tinychat-cpu.yaml",
    "kimi-k2-int4-experts-fp8kv-8xh200.yaml",
    "llama-70b-prefill-decode-fp8kv.yaml",
)
ANNOUNCEMENT = re.compile(r"upgrading restarts engines because", re.IGNORECASE)


def pod_templates(example: str) -> str:
    """The serving Deployments' pod templates of one example (engines and, where it has them, its
    routers), as the golden files hold them."""
    engines = [o for o in _render(example) if o["kind"] == "Deployment"]
    manifest = body(example)
    routers = [
        o
        for o in router_objects(manifest, spec_of(manifest), OperatorSettings())
        if o["kind"] == "Deployment"
    ]
    templates = {o["metadata"]["name"]: o["spec"]["template"] for o in [*engines, *routers]}
    return yaml.safe_dump(templates, sort_keys=True)


def last_release() -> Path:
    versions = [p for p in RELEASES.iterdir() if p.is_dir() and p.name != UNRELEASED]
    return max(versions, key=lambda p: tuple(int(x) for x in p.name.split(".")))


def unreleased_notes(changelog: str) -> str:
    """The changelog's `## [Unreleased]` section."""
    section = changelog.split("## [Unreleased]", 1)
    return section[1].split("\n## [", 1)[0] if len(section) == 2 else ""


def unannounced(
    current: dict[str, str], released: dict[str, str], golden: dict[str, str], changelog: str
) -> list[str]:
    """What keeps this rendering from shipping: a template that is not the reviewed golden one, or a
    change from the last release that the changelog does not announce."""
    problems = [
        f"{example}: the serving pod template is not golden/releases/{UNRELEASED}/{example} (refresh it with "
        "KVANT_UPDATE_GOLDEN=1, review the diff, and say in CHANGELOG.md why engines restart)"
        for example, rendered in current.items()
        if golden.get(example) != rendered
    ]
    changed = sorted(example for example, rendered in current.items() if released.get(example) != rendered)
    if changed and not ANNOUNCEMENT.search(unreleased_notes(changelog)):
        problems.append(
            f"{', '.join(changed)}: the serving pod template differs from the last release, so upgrading "
            "restarts engines; CHANGELOG.md's Unreleased section must say 'Upgrading restarts engines "
            "because ...'"
        )
    return problems


def _read(folder: Path) -> dict[str, str]:
    return {e: (folder / e).read_text() for e in EXAMPLES if (folder / e).exists()}


def test_this_rendering_restarts_engines_only_as_the_changelog_says() -> None:
    current = {example: pod_templates(example) for example in EXAMPLES}
    golden_dir = RELEASES / UNRELEASED
    if os.environ.get("KVANT_UPDATE_GOLDEN"):
        golden_dir.mkdir(exist_ok=True)
        for example, rendered in current.items():
            (golden_dir / example).write_text(rendered)
    problems = unannounced(current, _read(last_release()), _read(golden_dir), CHANGELOG.read_text())
    assert problems == [], "\n".join(problems)


@pytest.fixture
def tiny() -> str:
    return pod_templates("tiny.yaml")


def test_a_label_change_fails_until_golden_and_changelog_move_together(tiny: str) -> None:
    released = {"tiny.yaml": tiny}
    quiet = "## [Unreleased]\n\n### Added\n\n- a feature\n"
    assert unannounced({"tiny.yaml": tiny}, released, released, quiet) == []

    relabelled = tiny.replace("kvant.dev/model: tiny", "kvant.dev/model: tiny\n      team: a", 1)
    assert relabelled != tiny
    current = {"tiny.yaml": relabelled}
    assert len(unannounced(current, released, released, quiet)) == 2  # neither moved
    assert len(unannounced(current, released, current, quiet)) == 1  # golden only: not announced
    announced = quiet + "\n### Upgrading\n\n- Upgrading restarts engines because pods gain a team label.\n"
    assert len(unannounced(current, released, released, announced)) == 1  # changelog only: not reviewed
    assert unannounced(current, released, current, announced) == []
    released_notes = announced.replace("## [Unreleased]", "## [Unreleased]\n\n## [0.2.0]")
    assert len(unannounced(current, released, current, released_notes)) == 1  # an old release's words
