"""What `kvant fetch` takes from a remote listing: only safe relative paths, and by default only
what serving needs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kvant_runtime.fetch.fetcher import FetchOptions, fetch
from kvant_runtime.fetch.hf_remote import HfRemote
from kvant_runtime.fetch.remote import (
    DEFAULT_PATTERNS,
    FetchError,
    RemoteFile,
    Snapshot,
    safe_relative,
    selected,
)

# A Kimi-K2-style repository: weights and index, configs, tiktoken tokenizer, remote code, and
# files serving does not need.
LISTING = [
    ".gitattributes",
    "LICENSE",
    "README.md",
    "config.json",
    "configuration_deepseek.py",
    "docs/deploy_guidance.md",
    "figures/banner.png",
    "generation_config.json",
    "model-00001-of-00061.safetensors",
    "model-00061-of-00061.safetensors",
    "model.safetensors.index.json",
    "modeling_deepseek.py",
    "original/consolidated.00.pth",
    "tiktoken.model",
    "tokenization_kimi.py",
    "tokenizer_config.json",
    "chat_template.jinja",
]


def test_default_patterns_take_what_serving_needs_and_nothing_else() -> None:
    assert selected(LISTING, DEFAULT_PATTERNS) == [
        "config.json",
        "configuration_deepseek.py",
        "generation_config.json",
        "model-00001-of-00061.safetensors",
        "model-00061-of-00061.safetensors",
        "model.safetensors.index.json",
        "modeling_deepseek.py",
        "tiktoken.model",
        "tokenization_kimi.py",
        "tokenizer_config.json",
        "chat_template.jinja",
    ]


def test_default_patterns_take_a_multimodal_models_processor_configs() -> None:
    """Qwen2.5-VL-style: SGLang's image processor, and the gate's image count, read these."""
    listing = ["config.json", "preprocessor_config.json", "processor_config.json", "demo.jpeg", "vocab.json"]
    assert selected(listing, DEFAULT_PATTERNS) == [
        "config.json",
        "preprocessor_config.json",
        "processor_config.json",
        "vocab.json",
    ]


def test_patterns_match_a_whole_path_or_a_file_name() -> None:
    assert selected(LISTING, ["docs/*"]) == ["docs/deploy_guidance.md"]
    assert selected(LISTING, ["*.png"]) == ["figures/banner.png"]
    assert selected(LISTING, ["*.PNG"]) == [], "matching is case-sensitive, as file systems are"


@pytest.mark.parametrize(
    "path", ["../escape.safetensors", "a/../../x", "/etc/passwd", "a//b", "./a", "a\\b", ""]
)
def test_a_listed_path_that_could_leave_the_folder_is_refused(path: str) -> None:
    with pytest.raises(FetchError) as refused:
        safe_relative(path, "s3://bucket/prefix")
    assert refused.value.kind == "input" and "s3://bucket/prefix" in str(refused.value)


@pytest.mark.parametrize("path", ["config.json", "original/params.json", "a.b/c..d"])
def test_ordinary_paths_pass(path: str) -> None:
    assert safe_relative(path, "hf://org/name") == path


class _Escaping(HfRemote):
    """The Hub client for a hand-typed URI whose repo id climbs out of ROOT; resolved without a Hub."""

    def resolve(self) -> Snapshot:
        return Snapshot(self.uri, "0" * 40, f"hf/{self.repo_id}/{'0' * 40}", (RemoteFile("config.json", 2),))


def test_a_uri_whose_folder_would_leave_the_root_publishes_nothing(tmp_path: Path) -> None:
    remote = _Escaping("hf://../../outside", None, DEFAULT_PATTERNS, None, None)
    with pytest.raises(FetchError) as refused:
        fetch(remote, tmp_path / "root", FetchOptions(), io.StringIO())
    assert refused.value.kind == "input" and not (tmp_path / "outside").exists()
