"""The gate's rendered ServiceAccount, Role and RoleBinding on the real apiserver: a token of that
account lets the gate's own client list and watch its model's limits ConfigMap (and get it), and is
Forbidden on any other ConfigMap of the namespace, and on listing them all."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kvant_contracts.limits import LIMITS_FILE
from kvant_operator.render.gate_access import gate_account, gate_identity
from kvant_operator.render.limits_configmap import limits_configmap
from kvant_runtime.gate.limits_source import LimitsText
from kvant_runtime.gate.limits_watch import ApiServer, ConfigMapWatch, LimitsConfigMap
from tests.unit.render_inputs import body, spec_of

pytestmark = pytest.mark.cluster

NAMESPACE = "kvant-gate-rbac"
WAIT_SECONDS = 30.0


@pytest.fixture(scope="module")
def model(apiserver: Any) -> Iterator[dict[str, Any]]:
    """The tiny example's limits ConfigMap, the gate's identity, and a neighbour ConfigMap."""
    manifest = body("tiny.yaml")
    manifest["metadata"]["namespace"] = NAMESPACE
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    neighbour = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "other-limits", "namespace": NAMESPACE},
        "data": {LIMITS_FILE: "not the gate's"},
    }
    objects = [
        namespace,
        limits_configmap(manifest, spec_of(manifest), None),
        *gate_identity(manifest),
        neighbour,
    ]
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # the model itself does not exist here
        apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
    yield manifest
    apiserver.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture(scope="module")
def gate_api(apiserver: Any, model: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> ApiServer:
    """The apiserver as the gate sees it: its account's token (TokenRequest) and the cluster CA."""
    token = apiserver.kubectl("create", "token", gate_account("tiny"), "-n", NAMESPACE).stdout.strip()
    token_file = tmp_path_factory.mktemp("gate-token") / "token"
    token_file.write_text(token)
    return ApiServer(apiserver.control_plane.url, token_file, apiserver.control_plane.pki_dir / "ca.crt")


def _get(api: ApiServer, path: str) -> int:
    assert api.token_file is not None and api.ca_file is not None
    request = urllib.request.Request(
        api.url + path, headers={"Authorization": f"Bearer {api.token_file.read_text()}"}
    )
    context = ssl.create_default_context(cafile=str(api.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


async def _follow(watch: ConfigMapWatch, done: Callable[[list[LimitsText]], bool]) -> list[LimitsText]:
    """Runs the watch until `done(offers)` holds; fails after WAIT_SECONDS."""
    offers: list[LimitsText] = []
    task = asyncio.create_task(watch.follow(offers.append))
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            while not done(offers):
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return offers


def test_the_gate_lists_and_watches_its_limits_configmap(apiserver: Any, gate_api: ApiServer) -> None:
    target = LimitsConfigMap(gate_api, NAMESPACE, "tiny-limits")

    async def scenario() -> list[LimitsText]:
        watch = ConfigMapWatch(target)
        offers: list[LimitsText] = []
        task = asyncio.create_task(watch.follow(offers.append))
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while not offers:
                    await asyncio.sleep(0.05)
                patch = json.dumps({"data": {LIMITS_FILE: "maxConcurrency: 3\n"}})
                await asyncio.to_thread(
                    apiserver.kubectl, "patch", "configmap", "tiny-limits", "-n", NAMESPACE, "-p", patch
                )
                while offers[-1].content != b"maxConcurrency: 3\n":
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return offers

    offers = asyncio.run(scenario())
    assert offers[0].content is not None and b"maxConcurrency: 8" in offers[0].content  # the rendered limits
    assert all(o.content is not None for o in offers), [o.problem for o in offers]
    assert _get(gate_api, f"/api/v1/namespaces/{NAMESPACE}/configmaps/tiny-limits") == 200


def test_any_other_configmap_is_forbidden(gate_api: ApiServer) -> None:
    other = ConfigMapWatch(LimitsConfigMap(gate_api, NAMESPACE, "other-limits"))
    offers = asyncio.run(_follow(other, bool))
    assert offers[0].content is None and "answered 403" in offers[0].problem, offers[0]
    base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    assert _get(gate_api, f"{base}/other-limits") == 403
    assert _get(gate_api, base) == 403  # a list without the name selector
    assert _get(gate_api, "/api/v1/namespaces/default/configmaps/tiny-limits") == 403
