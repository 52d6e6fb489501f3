"""The Hub stand-in answers the real huggingface_hub client as the Hub would: resolved commits with LFS
sha256, byte-identical downloads, a cut download resumed with Range, the Hub's typed errors, and no
file from outside the served commit."""

from __future__ import annotations

import hashlib
import http.client
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from kvant_dev.hub_standin import LFS_MIN_SIZE, HubStandin, publish

REPO = "kvant-test/tiny-llama"
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def hf_home_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """huggingface_hub reads its settings at import: pin them, and the environment, online and under tmp."""
    home = tmp_path / "hf_home"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):  # traffic stays on loopback, never via a proxy
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_ASSETS_CACHE", str(home / "assets"))
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(home / "xet"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    huggingface_hub.close_session()  # the next client is built from this environment
    yield
    huggingface_hub.close_session()


def checkpoint(folder: Path, seed: int = 0) -> dict[str, bytes]:
    """A tiny model folder: small git files, a safetensors (LFS by name) and a big file (LFS by size)."""
    rng = random.Random(seed)
    files = {
        "config.json": b'{"model_type": "llama", "hidden_size": 64}\n',
        "tokenizer_config.json": b'{"model_max_length": 2048}\n',
        "model.safetensors": rng.randbytes(300_000),
        "extra/rotary.bin": rng.randbytes(LFS_MIN_SIZE + 17),
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return files


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubStandin]:
    with HubStandin(tmp_path / "hub") as standin:
        yield standin


def raw_get(
    hub: HubStandin, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request as sent, without a client that might normalise the path first."""
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_model_info_resolves_branch_tag_and_sha_with_lfs_sha256(hub: HubStandin, tmp_path: Path):
    files = checkpoint(tmp_path / "src")
    sha = publish(hub.root, REPO, tmp_path / "src", refs=("main", "v1"))

    api = HfApi(endpoint=hub.url, token=False)
    for revision in ("main", "v1", sha):
        info = api.model_info(REPO, revision=revision, files_metadata=True)
        assert info.sha == sha, revision
        siblings = {s.rfilename: s for s in info.siblings or []}
        assert sorted(siblings) == sorted(files)
        for name in ("model.safetensors", "extra/rotary.bin"):
            lfs = siblings[name].lfs
            assert lfs is not None, f"{name} should be an LFS file"
            assert (lfs.sha256, lfs.size) == (hashlib.sha256(files[name]).hexdigest(), len(files[name]))
        for name in ("config.json", "tokenizer_config.json"):
            assert siblings[name].lfs is None, f"{name} should be a plain git file"
            assert (siblings[name].size, siblings[name].blob_id) == (
                len(files[name]),
                git_blob_id(files[name]),
            )


def test_downloads_are_byte_identical(hub: HubStandin, tmp_path: Path):
    files = checkpoint(tmp_path / "src")
    sha = publish(hub.root, REPO, tmp_path / "src")
    assert files, "the checkpoint has no files to download"

    for name, data in files.items():
        local = hf_hub_download(
            REPO, name, revision=sha, local_dir=tmp_path / "dl", endpoint=hub.url, token=False
        )
        assert Path(local) == tmp_path / "dl" / name
        assert Path(local).read_bytes() == data, name


def test_a_cut_download_resumes_with_a_range_request(hub: HubStandin, tmp_path: Path):
    # huggingface_hub writes what it received in 10 MiB chunks (DOWNLOAD_CHUNK_SIZE) and resumes
    # from there, so the cut must come after the first chunk for a Range request to follow.
    (tmp_path / "src").mkdir()
    data = random.Random(1).randbytes(12 * MiB + 5)
    (tmp_path / "src" / "model.safetensors").write_bytes(data)
    sha = publish(hub.root, REPO, tmp_path / "src")
    cut = 11 * MiB
    hub.drop_next_download_after(cut)

    local = hf_hub_download(
        REPO, "model.safetensors", revision=sha, local_dir=tmp_path / "dl", endpoint=hub.url, token=False
    )

    assert Path(local).read_bytes() == data
    gets = [served for served in hub.served if served.method == "GET"]
    assert [(g.range, g.status) for g in gets[:1]] == [(None, 200)]
    assert len(gets) == 2, gets
    resumed = gets[1]
    assert resumed.status == 206 and resumed.range is not None and resumed.range.startswith("bytes="), resumed
    start = int(resumed.range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < start <= cut, resumed.range


def test_ranges_are_served_exactly_and_unsatisfiable_ones_refused(hub: HubStandin, tmp_path: Path):
    files = checkpoint(tmp_path / "src")
    publish(hub.root, REPO, tmp_path / "src")
    data, url = files["model.safetensors"], f"/{REPO}/resolve/main/model.safetensors"

    status, headers, body = raw_get(hub, url, {"Range": "bytes=1000-1999"})
    assert (status, headers["Content-Range"], body) == (206, f"bytes 1000-1999/{len(data)}", data[1000:2000])
    status, headers, body = raw_get(hub, url, {"Range": "bytes=299990-"})
    assert (status, headers["Content-Length"], body) == (206, "10", data[299990:])
    for unsatisfiable in (f"bytes={len(data)}-", "bytes=5-2", "bytes=0-1,4-5", "lines=1-2"):
        status, headers, _ = raw_get(hub, url, {"Range": unsatisfiable})
        assert (status, headers.get("Content-Range")) == (416, f"bytes */{len(data)}"), unsatisfiable


def test_missing_repo_revision_and_file_raise_the_hubs_typed_errors(hub: HubStandin, tmp_path: Path):
    checkpoint(tmp_path / "src")
    sha = publish(hub.root, REPO, tmp_path / "src")
    api = HfApi(endpoint=hub.url, token=False)

    def download(repo: str, name: str, revision: str) -> str:
        return hf_hub_download(
            repo, name, revision=revision, local_dir=tmp_path / "dl", endpoint=hub.url, token=False
        )

    with pytest.raises(RepositoryNotFoundError):
        api.model_info("kvant-test/absent", revision="main", files_metadata=True)
    with pytest.raises(RepositoryNotFoundError):
        download("kvant-test/absent", "config.json", "main")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="no-such-branch", files_metadata=True)
    with pytest.raises(RevisionNotFoundError):
        download(REPO, "config.json", "0" * 40)
    with pytest.raises(RemoteEntryNotFoundError):
        download(REPO, "absent.json", sha)
    assert not (tmp_path / "dl" / "absent.json").exists()


@pytest.mark.parametrize("sent", [False, "hf_wrong"], ids=["no-token", "wrong-token"])
def test_a_token_protected_hub_refuses_a_missing_or_wrong_token_with_401(tmp_path: Path, sent: bool | str):
    checkpoint(tmp_path / "src")
    sha = publish(tmp_path / "hub", REPO, tmp_path / "src")
    with HubStandin(tmp_path / "hub", token="hf_right") as hub:
        attempts = [
            lambda: HfApi(endpoint=hub.url, token=sent).model_info(
                REPO, revision="main", files_metadata=True
            ),
            lambda: hf_hub_download(
                REPO, "config.json", revision=sha, local_dir=tmp_path / "dl", endpoint=hub.url, token=sent
            ),
        ]
        for attempt in attempts:
            with pytest.raises(HfHubHTTPError) as raised:
                attempt()
            # A token problem, told apart from "no such repository" (and GatedRepoError, its subclass).
            assert raised.value.response.status_code == 401
            assert not isinstance(raised.value, RepositoryNotFoundError)
            assert "Invalid credentials" in str(raised.value)

        info = HfApi(endpoint=hub.url, token="hf_right").model_info(
            REPO, revision="main", files_metadata=True
        )
        assert info.sha == sha
        local = hf_hub_download(
            REPO, "config.json", revision=sha, local_dir=tmp_path / "dl", endpoint=hub.url, token="hf_right"
        )
        assert Path(local).read_bytes() == (tmp_path / "src" / "config.json").read_bytes()


def test_no_file_outside_the_commit_is_served(hub: HubStandin, tmp_path: Path):
    checkpoint(tmp_path / "src")
    sha = publish(hub.root, REPO, tmp_path / "src")
    secret = b"SECRET-outside-the-hub"
    (tmp_path / "secret.txt").write_bytes(secret)
    (hub.root / REPO / "secret.txt").write_bytes(secret)  # inside ROOT, outside any commit
    (hub.root / REPO / "commits" / sha / "link.json").symlink_to(tmp_path / "secret.txt")

    attempts = [
        f"/{REPO}/resolve/main/../../secret.txt",
        f"/{REPO}/resolve/main/%2e%2e/%2e%2e/secret.txt",
        f"/{REPO}/resolve/main/..%2F..%2Fsecret.txt",
        f"/{REPO}/resolve/main/..%2F..%2F..%2F..%2Fsecret.txt",
        f"/{REPO}/resolve/main//{tmp_path}/secret.txt",
        f"/{REPO}/resolve/main/%2F{str(tmp_path).lstrip('/')}%2Fsecret.txt",
        f"/{REPO}/resolve/main/link.json",
        "/kvant-test/..%2F..%2Fsecret.txt/resolve/main/config.json",
        f"/{REPO}/resolve/..%2F..%2Fsecret.txt/config.json",
        "/api/models/kvant-test/..%2F..%2F/revision/main",
    ]
    for path in attempts:
        status, _, body = raw_get(hub, path)
        assert status in (400, 404), (path, status)
        assert secret not in body, path
    info = HfApi(endpoint=hub.url, token=False).model_info(REPO, revision="main", files_metadata=True)
    assert "link.json" not in {s.rfilename for s in info.siblings or []}
    assert (
        raw_get(hub, f"/{REPO}/resolve/main/config.json")[0] == 200
    )  # the same server still serves its files


def test_publishing_is_content_addressed_and_moves_only_the_named_refs(hub: HubStandin, tmp_path: Path):
    checkpoint(tmp_path / "src")
    first = publish(hub.root, REPO, tmp_path / "src", refs=("main", "v1"))
    assert publish(hub.root, REPO, tmp_path / "src") == first
    (tmp_path / "src" / "config.json").write_bytes(b'{"model_type": "llama", "hidden_size": 128}\n')
    second = publish(hub.root, REPO, tmp_path / "src", refs=("main",))

    api = HfApi(endpoint=hub.url, token=False)
    assert second != first
    assert api.model_info(REPO, revision="main").sha == second
    assert api.model_info(REPO, revision="v1").sha == first
    old = hf_hub_download(
        REPO, "config.json", revision=first, local_dir=tmp_path / "old", endpoint=hub.url, token=False
    )
    assert b'"hidden_size": 64' in Path(old).read_bytes()


def test_the_cli_serves_with_a_token_until_sigterm(tmp_path: Path):
    checkpoint(tmp_path / "src")
    sha = publish(tmp_path / "hub", REPO, tmp_path / "src")
    (tmp_path / "token").write_text("hf_cli\n")
    command = [sys.executable, "-m", "kvant_dev.hub_standin", "--root", str(tmp_path / "hub")]
    command += ["--host", "127.0.0.1", "--port", "0", "--token-file", str(tmp_path / "token")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), (line, process.poll())
        url = line.removeprefix("listening on ")
        assert HfApi(endpoint=url, token="hf_cli").model_info(REPO, revision="main").sha == sha
        with pytest.raises(HfHubHTTPError):
            HfApi(endpoint=url, token=False).model_info(REPO, revision="main")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
