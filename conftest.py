"""Shared fixtures for tests/ and e2e/: one real local cluster per test session, started as far as needed.

`apiserver` starts etcd + kube-apiserver; `cluster` adds the controller-manager, the scheduler and
the node agent to the same cluster; `prometheus_factory` runs real Prometheus servers on demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from tests import host_leftovers
from tests.startup_report import report_startup

from kvant_dev.cluster import LocalCluster
from kvant_dev.prometheus import Prometheus, static_job
from kvant_dev.toolchain import MissingBinaryError, Toolchain

_session_cluster: LocalCluster | None = None
_HOST_BEFORE = pytest.StashKey[tuple[set[str], set[str]]]()

# Tool caches point at one session folder from here, at import: pytest loads e2e/conftest.py before
# the session starts, and what it imports (transformers) reads its cache folder (HF_MODULES_CACHE) once,
# when imported. This file imports none of them itself (checked: transformers is not loaded by it).
host_leftovers.redirect_tool_caches()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_HOST_BEFORE] = (host_leftovers.snapshot(), host_leftovers.network_snapshot())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the run when it left anything on the host (see tests/host_leftovers.py)."""
    host_leftovers.drop_tool_caches()
    files_before, network_before = session.config.stash[_HOST_BEFORE]
    left = host_leftovers.new_since(files_before, host_leftovers.snapshot())
    if not host_leftovers.shares_host_with_a_cluster():
        left += host_leftovers.new_since(network_before, host_leftovers.network_snapshot())
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"FAILED host leftovers: the suite left {left} on the host", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The component versions, once at the start of the run."""
    try:
        versions = Toolchain.locate().versions()
    except MissingBinaryError as err:
        return [f"local cluster binaries: {err}"]
    return ["local cluster components:", *(f"  {name}: {version}" for name, version in versions.items())]


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    return Toolchain.locate()


@pytest.fixture(scope="session")
def apiserver(
    tmp_path_factory: pytest.TempPathFactory, toolchain: Toolchain, pytestconfig: pytest.Config
) -> Iterator[LocalCluster]:
    global _session_cluster  # noqa: PLW0603 - the failure hook below needs the live cluster
    started = time.monotonic()
    # One spare node, cordoned: the node-loss test moves replicas onto it (e2e/test_a_lost_node_...).
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), spare_nodes=1, toolchain=toolchain)
    _session_cluster = cluster
    try:
        cluster.start_core()
        report_startup(pytestconfig, "etcd + kube-apiserver", started)
        yield cluster
    finally:
        cluster.stop()
        _session_cluster = None


@pytest.fixture(scope="session")
def cluster(apiserver: LocalCluster, pytestconfig: pytest.Config) -> LocalCluster:
    started = time.monotonic()
    apiserver.start_workloads()
    report_startup(pytestconfig, "controller-manager + scheduler + node agent", started)
    return apiserver


@pytest.fixture
def prometheus_factory(
    tmp_path: Path, toolchain: Toolchain, pytestconfig: pytest.Config
) -> Iterator[Callable[[list[str]], Prometheus]]:
    servers: list[Prometheus] = []

    def start(targets: list[str]) -> Prometheus:
        started = time.monotonic()
        server = Prometheus(
            toolchain.prometheus, tmp_path / f"prometheus-{len(servers)}", [static_job("test", targets)]
        )
        servers.append(server)
        server.start()
        report_startup(pytestconfig, "prometheus", started)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed and _session_cluster is not None and "apiserver" in getattr(item, "fixturenames", ()):
        report.sections.append(("local cluster logs (tail)", _session_cluster.diagnostics()))
    return report
