"""The router role: smg in front of the engines' gates, its command line parsed by smg's own parser,
least-privilege discovery, and the model's Service pointing at it only when it runs."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

import pytest
from smg.router_args import RouterArgs

from kvant_contracts.serving_pod import BOOTSTRAP_PORT, GATE_PORT
from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.roles import engine_selector
from kvant_operator.render.router import MESH_PORT, router_args, router_enabled
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of

SETTINGS = OperatorSettings()
PD = "llama-70b-prefill-decode-fp8kv.yaml"


class Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Refused(message)


def smg_parse(args: list[str]) -> RouterArgs:
    """`smg launch ARGS` as smg reads it, without starting the router."""
    assert args[0] == "launch"
    parser = _Parser(prog="smg launch", allow_abbrev=False)
    RouterArgs.add_cli_args(parser)
    return RouterArgs.from_cli_args(parser.parse_args(args[1:]))


def objects(model: dict[str, Any]) -> list[dict[str, Any]]:
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", SETTINGS)
    return serving_objects(inputs, None)


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in found if o["kind"] == kind]


@pytest.mark.parametrize(
    ("serving", "example", "on"),
    [
        ({}, "tiny.yaml", False),
        ({"replicas": 3}, "tiny.yaml", True),
        ({"replicas": 3, "router": {"enabled": False}}, "tiny.yaml", False),
        ({"router": {"enabled": True}}, "tiny.yaml", True),
        ({}, PD, True),
    ],
)
def test_the_router_runs_by_default_with_several_replicas_or_prefill_decode(
    serving: dict, example: str, on: bool
) -> None:
    model = body(example)
    model["spec"]["serving"].update(serving)
    assert router_enabled(spec_of(model)) is on
    accounts = {a["metadata"]["name"] for a in of_kind(objects(model), "ServiceAccount")}
    assert ("tiny-router" in accounts or "llama-70b-pd-router" in accounts) is on  # each gate has its own


def test_smg_parses_the_rendered_command_line_with_kvants_choices() -> None:
    model = body("tiny.yaml")
    model["spec"]["serving"].update({"replicas": 3, "router": {"policy": "power_of_two"}})
    spec = spec_of(model)
    parsed = smg_parse(router_args("tiny", "team-a", spec))
    assert parsed.service_discovery and parsed.service_discovery_namespace == "team-a"
    assert parsed.service_discovery_port == GATE_PORT  # the gates, never the engines
    assert parsed.selector == {"kvant.dev/model": "tiny", "kvant.dev/component": "engine"}
    assert parsed.policy == "power_of_two" and parsed.port == GATE_PORT
    assert parsed.worker_overload_token_usage == spec.protection.target_token_usage
    assert parsed.retry_max_retries == 3 and not parsed.disable_retries


def test_prefill_decode_goes_through_the_router_by_role() -> None:
    spec = spec_of(body(PD))
    parsed = smg_parse(router_args("llama-70b-pd", "team-a", spec))
    assert parsed.pd_disaggregation
    assert parsed.prefill_selector == {"kvant.dev/model": "llama-70b-pd", "kvant.dev/role": "prefill"}
    assert parsed.decode_selector == {"kvant.dev/model": "llama-70b-pd", "kvant.dev/role": "decode"}


def test_several_router_replicas_share_their_prefix_trees_through_smgs_mesh() -> None:
    spec = spec_of(body("tiny.yaml"))
    parsed = smg_parse(router_args("tiny", "team-a", spec))  # 2 router replicas by default
    assert parsed.enable_mesh and parsed.mesh_port == MESH_PORT
    assert parsed.mesh_peer_urls == []  # IP:port only: `kvant router` adds them (test_router_command)
    assert (parsed.mesh_server_name, parsed.mesh_advertise_host) == ("$(POD_NAME)", "$(POD_IP)")
    single = spec.model_copy(
        update={
            "serving": spec.serving.model_copy(
                update={"router": spec.serving.router.model_copy(update={"replicas": 1})}
            )
        }
    )
    assert not smg_parse(router_args("tiny", "team-a", single)).enable_mesh


def test_a_flag_smg_does_not_know_fails_here_not_in_a_pod() -> None:
    with pytest.raises(Refused, match="--no-such-router-flag"):
        smg_parse([*router_args("tiny", "team-a", spec_of(body("tiny.yaml"))), "--no-such-router-flag"])


def test_the_router_reads_pods_and_nothing_else_and_the_service_points_at_it() -> None:
    model = body("tiny.yaml")
    model["spec"]["serving"]["replicas"] = 3
    found = objects(model)
    (role,) = [r for r in of_kind(found, "Role") if r["metadata"]["name"] == "tiny-router"]  # and the gate's
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [b for b in of_kind(found, "RoleBinding") if b["metadata"]["name"] == "tiny-router"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "tiny-router"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tiny-router", "namespace": "team-a"}]
    router = next(d for d in of_kind(found, "Deployment") if d["metadata"]["name"] == "tiny-router")
    pod = router["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tiny-router" and pod["automountServiceAccountToken"] is False
    # The token reaches the router container through its own projected volume, at the standard path.
    mounts = pod["containers"][0]["volumeMounts"]
    (mount,) = [m for m in mounts if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert {"serviceAccountToken"} <= {k for source in volume["projected"]["sources"] for k in source}
    assert pod["securityContext"]["runAsNonRoot"] and router["spec"]["replicas"] == 2
    # Two replicas share their prefix trees: `kvant router` finds the mesh peers, then execs smg.
    assert pod["containers"][0]["command"] == ["kvant"]
    launcher = pod["containers"][0]["args"]
    assert launcher[: launcher.index("--")] == [
        "router", "--mesh-service", "tiny-router-mesh", "--mesh-port", str(MESH_PORT), "--replicas", "2",
    ]  # fmt: skip
    smg_parse(launcher[launcher.index("--") + 1 :])
    engines = [d for d in of_kind(found, "Deployment") if d["metadata"]["name"] == "tiny"]
    assert engines and engines[0]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    services = {s["metadata"]["name"]: s for s in of_kind(found, "Service")}
    service, mesh = services["tiny"], services["tiny-router-mesh"]
    assert service["metadata"]["name"] == "tiny"
    assert service["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    # The router replicas find each other for smg's mesh through a headless Service of their own.
    assert mesh["spec"]["clusterIP"] == "None" and mesh["spec"]["publishNotReadyAddresses"]
    assert mesh["spec"]["selector"] == service["spec"]["selector"]
    assert {b["metadata"]["name"] for b in of_kind(found, "PodDisruptionBudget")} == {"tiny", "tiny-router"}
    # Engines stay what the scale subresource, protection and scraping count; the router is not one.
    labels = router["spec"]["template"]["metadata"]["labels"]
    assert labels["kvant.dev/component"] == "router" and "component=engine" in engine_selector("tiny")


def test_prefill_pods_publish_their_bootstrap_port_where_smg_reads_it_and_the_gate_relays_it() -> None:
    found = objects(body(PD))
    by_role = {d["metadata"]["labels"]["kvant.dev/role"]: d for d in of_kind(found, "Deployment")}
    annotation = RouterArgs.bootstrap_port_annotation  # smg's own default, not a copy of the name
    prefill, decode = (by_role[r]["spec"]["template"] for r in ("prefill", "decode"))
    assert prefill["metadata"]["annotations"][annotation] == str(BOOTSTRAP_PORT)
    assert annotation not in decode["metadata"]["annotations"]
    gate = next(c for c in prefill["spec"]["containers"] if c["name"] == "gate")
    assert gate["args"][-2:] == ["--relay", f"$(POD_IP):{BOOTSTRAP_PORT}"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in gate["env"]
    decode_gate = next(c for c in decode["spec"]["containers"] if c["name"] == "gate")
    assert "--relay" not in decode_gate["args"]
