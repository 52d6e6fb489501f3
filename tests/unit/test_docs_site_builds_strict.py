"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, and what links into
it resolves.

mkdocs.yml's `validation:` settings make a link to a missing page or file, a link to a missing
heading, and a nav entry without its page warnings, which `--strict` turns into a failed build; a
test below breaks each once in a copy of the docs to keep that so. Every alert's `runbook_url` must
name a page and a heading id of the *built* site, and the README's relative links must resolve from
the repository root (the README draft in docs/ is written for that place too).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "kvant" / "files" / "kvant-alerts.yaml"
README = ROOT / "README.md"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        # mkdocs-material prints a banner about MkDocs 2.0 unless told not to.
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = _build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    return out


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', page.read_text()))


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries: list[object]) -> list[str]:
        found: list[str] = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += pages(value) if isinstance(value, list) else [str(value)]
        return found

    sources = pages(nav)
    assert sources, "mkdocs.yml's nav lists no pages"
    for source in sources:
        folder = source.removesuffix(".md")  # use_directory_urls: a/b.md is a/b/index.html
        if folder == "index" or folder.endswith("/index"):
            folder = folder.removesuffix("index")
        built = site / folder / "index.html"
        assert built.is_file(), f"{source} was not built ({built.relative_to(site)})"


def test_every_alert_runbook_url_names_a_page_and_anchor_of_the_built_site(site: Path) -> None:
    site_url = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"]
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert rules
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(site_url), f"{rule['alert']}: {url} is not on the docs site {site_url}"
        path, _, anchor = url.removeprefix(site_url).partition("#")
        page = site / path / "index.html" if path == "" or path.endswith("/") else site / path
        assert page.is_file(), f"{rule['alert']}: {url} names no page of the built site"
        assert anchor, f"{rule['alert']}: {url} names no section"
        assert anchor in _ids(page), f"{rule['alert']}: {page.relative_to(site)} has no id {anchor!r}"


def test_the_strict_build_fails_on_a_broken_link_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "bench").symlink_to(ROOT / "bench")  # the plots the hook publishes
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["nav"].append({"Gone": "no-such-page-in-nav.md"})
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[a](no-such-page.md) [b](operations/runbook.md#no-such-anchor)\n")
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for broken in ("no-such-page.md", "#no-such-anchor", "no-such-page-in-nav.md"):
        assert broken in output, f"the build did not complain about {broken}:\n{output}"


def test_the_readmes_relative_links_resolve_from_the_repository_root() -> None:
    readme = README
    text = re.sub(r"```.*?```", "", readme.read_text(), flags=re.DOTALL)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    for target in targets:
        if re.match(r"[a-z]+:|#", target):
            continue
        path = target.split("#", 1)[0]
        assert (ROOT / path).exists(), f"{readme.name} links to {target}, which is not in the repository"
