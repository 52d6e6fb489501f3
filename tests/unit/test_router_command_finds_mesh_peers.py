"""`kvant router` passes smg the other router pods as mesh peers: it waits (bounded) until the headless
Service lists the replicas the Deployment wants, never lists the pod itself, and starts alone when
nobody else is there, so that later replicas join it."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

import pytest

from kvant_runtime import router_command
from kvant_runtime.router_command import Resolver, find_peers


def scripted(*answers: set[str]) -> tuple[list[str], Resolver]:
    """A resolver answering in turn (the last answer repeats), recording its calls."""
    calls: list[str] = []

    def lookup(name: str) -> set[str]:
        calls.append(name)
        return answers[min(len(calls), len(answers)) - 1]

    return calls, lookup


def test_waits_until_every_replica_is_listed_and_leaves_itself_out() -> None:
    calls, lookup = scripted(set(), {"198.18.0.7"}, {"198.18.0.7", "198.18.0.9"})
    peers = find_peers("r-mesh", "198.18.0.7", 2, 30.0, lookup=lookup, sleep=lambda _: None)
    assert peers == ["198.18.0.9"] and calls == ["r-mesh"] * 3


def test_starts_alone_when_the_wait_ends_with_nobody_else() -> None:
    _, lookup = scripted({"198.18.0.7"})
    assert find_peers("r-mesh", "198.18.0.7", 3, 0.0, lookup=lookup, sleep=lambda _: None) == []


def test_a_name_that_does_not_resolve_is_no_peers_not_an_error() -> None:
    assert router_command.resolve("no-such-router-mesh.invalid") == set()


def test_execs_smg_with_the_peers_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "smg"  # records its argv: the exec is what is under test, not smg
    fake.write_text(f"#!{sys.executable}\nimport sys, json; print(json.dumps(sys.argv[1:]))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("POD_IP", "198.18.0.7")
    monkeypatch.setattr(router_command, "resolve", lambda _: {"198.18.0.7", "198.18.0.9", "fd00::3"})
    execs: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: execs.append([path, *argv]))
    args = argparse.Namespace(
        mesh_service="r-mesh",
        mesh_port=39527,
        replicas=3,
        wait_seconds=0.0,
        smg_args=["--", "launch", "--port", "8000"],
    )
    router_command.run(args)
    (argv,) = execs
    assert argv[0] == str(fake) and argv[2:] == [
        "launch", "--port", "8000", "--mesh-peer-urls", "198.18.0.9:39527", "[fd00::3]:39527",
    ]  # fmt: skip
