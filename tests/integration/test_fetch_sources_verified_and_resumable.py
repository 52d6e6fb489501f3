"""`kvant fetch` against real servers: SeaweedFS for s3://, the Hub stand-in for hf://, with a
fault-injecting proxy between them and the fetcher for dropped connections and corrupted bytes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvant_contracts.artifact_manifest import MANIFEST_NAME, verify_artifact
from kvant_dev.hub_standin import HubStandin, publish
from kvant_dev.s3server import S3Server
from kvant_runtime.fetch.fetcher import FetchOptions, fetch
from kvant_runtime.fetch.hf_remote import HfRemote
from kvant_runtime.fetch.remote import DEFAULT_PATTERNS, FetchError, RemoteFile
from kvant_runtime.fetch.s3_remote import S3Remote
from tests.fault_proxy import FaultProxy
from tests.model_stores import create_bucket, upload_folder

pytestmark = pytest.mark.cluster  # needs the SeaweedFS binary that hack/toolchain.sh builds

MiB = 2**20
BUCKET = "models"
FAST = FetchOptions(staging_id="test", workers=4, attempts=3, backoff_s=0.05)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint-shaped folder: one multipart-sized shard (ETag not an MD5), one single-part shard,
    configs, and a file that serving does not need."""
    folder = tmp_path_factory.mktemp("checkpoint")
    (folder / "model-00001-of-00002.safetensors").write_bytes(os.urandom(12 * MiB))
    (folder / "model-00002-of-00002.safetensors").write_bytes(os.urandom(3 * MiB))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "README.md").write_text("not fetched by default")
    return folder


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        upload_folder(create_bucket(server, BUCKET), checkpoint, BUCKET, "tiny")
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_proxy(s3: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy((s3.host, s3.port)) as proxy:
        yield proxy


@pytest.fixture(autouse=True)
def s3_credentials(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3.env().items():
        if name != "AWS_ENDPOINT_URL":
            monkeypatch.setenv(name, value)


def s3_remote(url: str, uri: str = f"s3://{BUCKET}/tiny") -> S3Remote:
    return S3Remote(uri, DEFAULT_PATTERNS, url, "us-east-1")


def same_files(published: Path, checkpoint: Path) -> None:
    names = sorted(p.name for p in published.iterdir() if p.name != MANIFEST_NAME)
    assert names == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ]
    for name in names:
        assert (published / name).read_bytes() == (checkpoint / name).read_bytes(), name
    manifest = verify_artifact(published, None, content=True)
    for name in names:
        assert manifest.files[name].sha256 == hashlib.sha256((checkpoint / name).read_bytes()).hexdigest()


def test_s3_fetch_publishes_verified_files_and_a_second_fetch_reuses_them(
    s3: S3Server, s3_proxy: FaultProxy, checkpoint: Path, tmp_path: Path
) -> None:
    out = io.StringIO()
    first = fetch(s3_remote(s3_proxy.url), tmp_path, FAST, out)
    same_files(tmp_path / first.path, checkpoint)
    assert first.files == 4 and first.bytes == 15 * MiB + sum(
        (checkpoint / n).stat().st_size for n in ("config.json", "tokenizer.json")
    )
    assert not [p for p in (tmp_path / first.path).iterdir() if p.name.startswith(".")], "staging left behind"
    progress = [json.loads(line) for line in out.getvalue().splitlines()]
    assert progress[0]["event"] == "start" and progress[-1]["event"] == "done"
    assert progress[-1]["filesDone"] == 4 and progress[-1]["bytesDone"] == first.bytes

    served = s3_proxy.counts.responses
    again = fetch(s3_remote(s3_proxy.url), tmp_path, FetchOptions(staging_id="other"), io.StringIO())
    assert (again.path, again.sourceDigest, again.revision) == (
        first.path,
        first.sourceDigest,
        first.revision,
    )
    # The listing and the multipart shard's part-size lookup; no file is downloaded again.
    assert s3_proxy.counts.responses - served == 2, "a published revision is listed, not downloaded again"


class RecordingS3Remote(S3Remote):
    """Records where each GET started, to show that a resumed download asked for the rest only."""

    starts: list[tuple[str, int]]

    def fill(self, file: RemoteFile, part: Path, start: int) -> None:
        self.starts.append((file.path, start))
        super().fill(file, part, start)


def test_s3_dropped_connection_resumes_by_range(
    s3_proxy: FaultProxy, checkpoint: Path, tmp_path: Path
) -> None:
    remote = RecordingS3Remote(f"s3://{BUCKET}/tiny", DEFAULT_PATTERNS, s3_proxy.url, "us-east-1")
    remote.starts = []
    s3_proxy.cut_after(5 * MiB, times=1, min_body=10 * MiB)
    result = fetch(remote, tmp_path, FAST, io.StringIO())
    assert s3_proxy.counts.cut == 1
    big = "model-00001-of-00002.safetensors"
    resumed = [start for path, start in remote.starts if path == big]
    assert resumed[0] == 0 and len(resumed) == 2 and 0 < resumed[1] <= 5 * MiB, remote.starts
    same_files(tmp_path / result.path, checkpoint)


@pytest.mark.parametrize("min_body", [2 * MiB, 10 * MiB], ids=["first-response", "multipart-shard"])
def test_s3_corrupted_bytes_are_caught_and_refetched(
    min_body: int, s3_proxy: FaultProxy, checkpoint: Path, tmp_path: Path
) -> None:
    # Either shard is caught: the single-part one by its MD5 ETag, the multipart one by its parts'
    # ETag (the part size from HeadObject PartNumber=1).
    s3_proxy.corrupt(times=1, min_body=min_body, offset=MiB)
    result = fetch(s3_remote(s3_proxy.url), tmp_path, FAST, io.StringIO())
    assert s3_proxy.counts.corrupted == 1
    same_files(tmp_path / result.path, checkpoint)


def test_s3_corruption_that_persists_fails_clearly_and_publishes_nothing(
    s3_proxy: FaultProxy, tmp_path: Path
) -> None:
    s3_proxy.corrupt(times=100, min_body=2 * MiB, offset=MiB)
    with pytest.raises(FetchError) as failure:
        fetch(s3_remote(s3_proxy.url), tmp_path, FAST, io.StringIO())
    assert failure.value.kind == "integrity"
    message = str(failure.value)
    assert ".safetensors" in message and "ETag" in message and "after 3 attempts" in message
    assert not list(tmp_path.rglob(MANIFEST_NAME)), "a fetch that failed verification published a folder"


def test_a_volume_too_small_is_refused_before_any_download_naming_the_bytes(
    s3_proxy: FaultProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk, as the fetcher sees it: disk_usage reports 1 MiB free on the sources volume.
    usage = shutil.disk_usage(tmp_path)._replace(free=MiB)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    served = s3_proxy.counts.responses
    with pytest.raises(FetchError) as refused:
        fetch(s3_remote(s3_proxy.url), tmp_path, FAST, io.StringIO())
    assert refused.value.kind == "disk" and f"has {MiB} free" in str(refused.value)
    assert "needs 15" in str(refused.value)  # ~15.7 MB more bytes, named in full
    assert s3_proxy.counts.responses - served == 2, "only the listing and a part lookup: nothing downloaded"


def run_fetch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    kvant = Path(sys.executable).with_name("kvant")
    return subprocess.run(
        [str(kvant), "fetch", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_s3_missing_prefix_and_bad_keys_fail_with_the_cause(s3: S3Server, tmp_path: Path) -> None:
    env = {**os.environ, **s3.env()}
    missing = run_fetch("s3://no-such-bucket/tiny", str(tmp_path), env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    error = json.loads(missing.stdout.strip().splitlines()[-1])
    assert error["kind"] == "not-found" and "s3://no-such-bucket/tiny" in error["message"]

    empty = run_fetch(f"s3://{BUCKET}/nothing-here", str(tmp_path), env=env)
    assert json.loads(empty.stdout.strip().splitlines()[-1])["kind"] == "not-found"

    bad = run_fetch(f"s3://{BUCKET}/tiny", str(tmp_path), env={**env, "AWS_SECRET_ACCESS_KEY": "wrong"})
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    error = json.loads(bad.stdout.strip().splitlines()[-1])
    assert error["kind"] == "auth" and "credentialsSecret" in error["message"]


def test_s3_killed_fetch_resumes_to_the_same_digest(
    s3: S3Server, s3_proxy: FaultProxy, checkpoint: Path, tmp_path: Path
) -> None:
    env = {**os.environ, **s3.env(), "AWS_ENDPOINT_URL": s3_proxy.url}
    reference = fetch(s3_remote(s3_proxy.url), tmp_path / "reference", FAST, io.StringIO())
    s3_proxy.throttle(2 * MiB)
    root = tmp_path / "killed"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("kvant")),
            "fetch",
            f"s3://{BUCKET}/tiny",
            str(root),
            "--staging-id",
            "job",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        part = None
        while time.monotonic() < deadline and part is None:
            part = next((p for p in root.rglob("*.part") if p.stat().st_size >= MiB), None)
            time.sleep(0.1)
        assert part is not None, "the fetch never wrote a partial file"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert part.exists() and not list(root.rglob(MANIFEST_NAME))
    s3_proxy.throttle(None)
    resumed = run_fetch(f"s3://{BUCKET}/tiny", str(root), "--staging-id", "job", env=env)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (result["sourceDigest"], result["path"]) == (reference.sourceDigest, reference.path)
    same_files(root / result["path"], checkpoint)


# --- hf:// against the Hub stand-in -------------------------------------------------------------

REPO = "kvant-test/tiny"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> Iterator[tuple[HubStandin, str, str]]:
    root = tmp_path_factory.mktemp("hub")
    first = publish(root, REPO, checkpoint, refs=("v1",))
    changed = tmp_path_factory.mktemp("changed")
    shutil.copytree(checkpoint, changed, dirs_exist_ok=True)
    (changed / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "changed": True}))
    main = publish(root, REPO, changed, refs=("main",))
    with HubStandin(root, token="hf_test_token") as server:
        yield server, first, main


@pytest.fixture
def hub_proxy(hub: tuple[HubStandin, str, str]) -> Iterator[FaultProxy]:
    server = hub[0]
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with FaultProxy((host, int(port))) as proxy:
        yield proxy


@pytest.fixture(autouse=True)
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def hf_remote(url: str, revision: str | None, token: str | None = "hf_test_token") -> HfRemote:
    return HfRemote(f"hf://{REPO}", revision, DEFAULT_PATTERNS, url, token)


def test_hf_fetch_pins_a_tag_to_its_commit_and_verifies_every_file(
    hub: tuple[HubStandin, str, str], checkpoint: Path, tmp_path: Path
) -> None:
    server, first, main = hub
    result = fetch(hf_remote(server.url, "v1"), tmp_path, FAST, io.StringIO())
    assert result.revision == first and result.path == f"hf/{REPO}/{first}"
    same_files(tmp_path / result.path, checkpoint)
    moved = fetch(hf_remote(server.url, None), tmp_path, FAST, io.StringIO())
    assert moved.revision == main != first and moved.path != result.path, "main resolves to its own commit"


def test_hf_dropped_connection_and_corruption_are_survived(
    hub: tuple[HubStandin, str, str], hub_proxy: FaultProxy, checkpoint: Path, tmp_path: Path
) -> None:
    first = hub[1]
    hub_proxy.cut_after(4 * MiB, times=1, min_body=10 * MiB)
    hub_proxy.corrupt(times=1, min_body=2 * MiB, offset=100)
    result = fetch(hf_remote(hub_proxy.url, first), tmp_path, FAST, io.StringIO())
    assert hub_proxy.counts.cut == 1 and hub_proxy.counts.corrupted == 1
    same_files(tmp_path / result.path, checkpoint)


def test_hf_persistent_corruption_fails_on_the_lfs_hash(
    hub: tuple[HubStandin, str, str], hub_proxy: FaultProxy, tmp_path: Path
) -> None:
    hub_proxy.corrupt(times=100, min_body=2 * MiB, offset=100)
    with pytest.raises(FetchError) as failure:
        fetch(hf_remote(hub_proxy.url, hub[1]), tmp_path, FAST, io.StringIO())
    assert failure.value.kind == "integrity" and "sha256" in str(failure.value)
    assert not list(tmp_path.rglob(MANIFEST_NAME))


def test_hf_bad_token_and_missing_revision_name_the_cause(
    hub: tuple[HubStandin, str, str], tmp_path: Path
) -> None:
    server = hub[0]
    with pytest.raises(FetchError) as denied:
        fetch(hf_remote(server.url, "v1", token="wrong"), tmp_path, FAST, io.StringIO())
    assert (
        denied.value.kind == "auth"
        and f"hf://{REPO}" in str(denied.value)
        and "HF_TOKEN" in str(denied.value)
    )
    with pytest.raises(FetchError) as missing:
        fetch(hf_remote(server.url, "v9"), tmp_path, FAST, io.StringIO())
    assert missing.value.kind == "not-found" and "revision" in str(missing.value)
