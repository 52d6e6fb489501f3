"""An SGLang engine runs the user's image: the launcher arrives as a zipapp from an init container,
an `engine-check` in the user's image reports its SGLang into status.engine, and a refusal there is
a Degraded naming the image and the cause."""

from __future__ import annotations

import json

from kvant_contracts.job_lines import EngineCheck
from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import ArtifactStatus, Phase
from kvant_operator.artifact_recipe import source_location
from kvant_operator.reconcile.serving_step import serve
from kvant_operator.reconcile.state import Pass
from kvant_operator.render.engine_launcher import CHECK_CONTAINER, PYZ
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, condition, new_pass
from tests.unit.render_inputs import plan, spec_of

IMAGE = "lmsysorg/sglang:v0.5.23"
SGLANG = {"engine": "sglang", "image": IMAGE, "gpu": {"memoryGiB": 80}}


def sglang_model() -> Obj:
    return body(serving=SGLANG, weights={"format": "bf16"}, kvCache={"dtype": "fp8_e4m3", "scales": "unit"})


def rendered_pod(model: Obj) -> Obj:
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", SETTINGS)
    pod: Obj = deployment(inputs, roles(spec)[0])["spec"]["template"]["spec"]
    return pod


def test_the_engine_runs_the_users_image_with_the_launcher_from_an_init_container() -> None:
    pod = rendered_pod(sglang_model())
    engine = pod["containers"][0]
    assert (
        engine["image"] == IMAGE and engine["command"] == ["python3", PYZ] and engine["args"][0] == "launch"
    )
    launcher, check = pod["initContainers"]
    assert launcher["image"] == SETTINGS.runtime_image and launcher["args"] == ["launch-zipapp", PYZ]
    assert check["name"] == CHECK_CONTAINER and check["image"] == IMAGE
    assert check["command"] == engine["command"] and check["args"] == [*engine["args"], "--check"]
    assert {"name": "launcher", "emptyDir": {}} in pod["volumes"]
    assert "nvidia.com/gpu" not in json.dumps(check), "the check needs no GPU"
    # The simulator needs none of it.
    assert "initContainers" not in rendered_pod(body())


def engine_pod(name: str, image: str, exit_code: int, created: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kvant.dev/model": "tiny", "kvant.dev/component": "engine"},
            "creationTimestamp": created,
        },
        "spec": {"initContainers": [{"name": "launcher"}, {"name": CHECK_CONTAINER, "image": image}]},
        "status": {
            "initContainerStatuses": [
                {"name": CHECK_CONTAINER, "state": {"terminated": {"exitCode": exit_code}}},
            ]
        },
    }


def serving_pass() -> Pass:
    p = new_pass(sglang_model(), planned=True)
    p.artifact = ArtifactStatus(uri="file:///var/lib/kvant/models/tiny-llama")
    return p


def test_the_images_sglang_is_recorded_in_status() -> None:
    kube = MemoryKube()
    kube.objects[("v1", "Pod", NAMESPACE, "old")] = engine_pod(
        "old", "an/older:image", 0, "2026-11-30T11:00:00Z"
    )
    kube.objects[("v1", "Pod", NAMESPACE, "new")] = engine_pod("new", IMAGE, 0, "2026-11-30T12:00:00Z")
    kube.logs[(NAMESPACE, "new", CHECK_CONTAINER)] = json.dumps(
        EngineCheck("0.5.23", "3.12.3", True, None).fields()
    )
    p = serving_pass()
    serve(p, kube, SETTINGS)
    assert p.engine is not None and (p.engine.image, p.engine.sglang_version, p.engine.python) == (
        IMAGE,
        "0.5.23",
        "3.12.3",
    )


def test_an_image_the_launcher_cannot_drive_is_degraded_naming_it() -> None:
    kube = MemoryKube()
    kube.objects[("v1", "Pod", NAMESPACE, "p")] = engine_pod("p", IMAGE, 2, "2026-11-30T12:00:00Z")
    problem = "the image has SGLang 0.6.1; kvant launch drives SGLang 0.5.x"
    kube.logs[(NAMESPACE, "p", CHECK_CONTAINER)] = "noise\n" + json.dumps(
        EngineCheck("0.6.1", "3.12.3", False, problem).fields()
    )
    p = serving_pass()
    phase, busy = serve(p, kube, SETTINGS)
    assert phase is Phase.DEGRADED and busy
    degraded = condition(p, "Degraded")
    assert (
        degraded.reason == "EngineCheckFailed" and IMAGE in degraded.message and "0.6.1" in degraded.message
    )


def test_a_settled_model_reads_no_logs_once_its_image_is_known() -> None:
    kube = MemoryKube()
    p = serving_pass()
    serve(p, kube, SETTINGS)
    kube.roll_out(NAMESPACE, "tiny")
    kube.objects[("v1", "Pod", NAMESPACE, "p")] = engine_pod("p", IMAGE, 0, "2026-11-30T12:00:00Z")
    kube.logs[(NAMESPACE, "p", CHECK_CONTAINER)] = json.dumps(
        EngineCheck("0.5.23", "3.12.3", True, None).fields()
    )
    first = serving_pass()
    serve(first, kube, SETTINGS)
    assert first.engine is not None
    kube.logs.clear()  # a read now would find nothing and leave engine unset
    again = serving_pass()
    again.engine = first.engine
    assert serve(again, kube, SETTINGS) == (Phase.READY, False) and again.engine == first.engine
