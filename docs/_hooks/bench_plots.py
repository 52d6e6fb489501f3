"""MkDocs hook: publishes the benchmarks' committed plots (`bench/**/*.png`) at `bench/...` in the site.

The pages show the very plots the benches draw and commit (`bench/README.md` says which command draws
each), so no copy in docs/ can go stale. A page links one as `bench/engine_sim/batch.png` relative to
the docs root (`../bench/...` one folder down).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for png in sorted((ROOT / "bench").rglob("*.png")):
        relative = png.relative_to(ROOT)
        if "out" in relative.parts:  # a bench's scratch output (/bench/**/out/ is git-ignored)
            continue
        files.append(
            File(
                relative.as_posix(),
                src_dir=str(ROOT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files
