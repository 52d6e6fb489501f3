"""`spec.serving.device: cpu`: accepted only in shapes that build, planned from the container's memory,
and rendered as a CPU engine with its memory and cores."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from kvant_contracts.launch_spec import Device, parse_spec_json
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.planner import PlanRequest, load_checkpoint, make_plan
from kvant_operator.planner.capacity import CPU_ENGINE_RESERVE_BYTES, GIB, MIB
from kvant_operator.render.jobs import plan_args
from kvant_operator.render.offline import render_offline
from tests.tiny_checkpoints import tiny_checkpoint

CPU_SPEC: dict[str, Any] = {
    "source": {"uri": "file:///models/tiny"},
    "weights": {"format": "bf16"},
    "kvCache": {"dtype": "bf16"},
    "serving": {"device": "cpu", "cpu": {"memoryGiB": 6, "cores": 2, "kvCacheMiB": 1}},
}


def spec(**serving: object) -> QuantizedModelSpec:
    raw = json.loads(json.dumps(CPU_SPEC))
    raw["serving"].update(serving)
    return QuantizedModelSpec.model_validate(raw)


def rejected(**serving: object) -> str:
    with pytest.raises(ValidationError) as caught:
        spec(**serving)
    return str(caught.value)


def test_cpu_spec_parses_and_requests_no_gpu():
    parsed = spec()
    assert parsed.serving.device is Device.CPU
    assert parsed.serving.gpus == 0
    assert parsed.serving.cpu is not None and parsed.serving.cpu.kv_cache_mib == 1


def test_each_device_needs_its_own_block():
    assert "device cpu needs spec.serving.cpu" in rejected(cpu=None)
    assert "no spec.serving.gpu" in rejected(gpu={"memoryGiB": 80})
    gpu_only = {
        "source": {"uri": "file:///m"},
        "serving": {"cpu": {"memoryGiB": 4}, "gpu": {"memoryGiB": 80}},
    }
    with pytest.raises(ValidationError, match=r"device cuda \(the default\) needs spec.serving.gpu"):
        QuantizedModelSpec.model_validate(gpu_only)


@pytest.mark.parametrize(
    "serving",
    [{"tensorParallel": 2}, {"memFractionStatic": 0.8}, {"disaggregation": {"mode": "prefill-decode"}}],
)
def test_cpu_refuses_what_it_cannot_build(serving):
    assert "spec.serving.device cpu serves one engine process per replica" in rejected(**serving)


def test_cpu_refuses_an_e5m2_cache_naming_the_field():
    raw = {**json.loads(json.dumps(CPU_SPEC)), "kvCache": {"dtype": "fp8_e5m2", "scales": "unit"}}
    with pytest.raises(
        ValidationError, match=r"spec.kvCache.dtype fp8_e5m2 cannot serve on spec.serving.device cpu"
    ):
        QuantizedModelSpec.model_validate(raw)


def test_cpu_plan_sizes_kv_from_the_containers_memory():
    checkpoint = load_checkpoint(tiny_checkpoint("llama"))
    capped = make_plan(checkpoint, PlanRequest.from_spec(spec()))
    cell = capped.kv_bytes_per_token_per_gpu
    assert capped.kv_tokens_per_replica == MIB // cell  # kvCacheMiB: 1
    assert capped.mem_fraction_static_source == "cpu-memory"
    whole = make_plan(checkpoint, PlanRequest.from_spec(spec(cpu={"memoryGiB": 6})))
    room = 6 * GIB - CPU_ENGINE_RESERVE_BYTES - whole.weight_bytes_per_gpu
    assert whole.kv_tokens_per_replica == room // cell
    small = make_plan(checkpoint, PlanRequest.from_spec(spec(cpu={"memoryGiB": 3})))
    assert small.kv_tokens_per_replica == 0 and not small.fits
    assert any("raise spec.serving.cpu.memoryGiB" in w for w in small.warnings)


def test_the_plan_job_plans_for_cpu():
    args = plan_args(spec(), "/source")
    assert args[args.index("--device") + 1] == "cpu"
    assert args[args.index("--kv-cache-mib") + 1] == "1"
    assert "--gpus" not in args


def test_cpu_engine_container_requests_memory_and_cores():
    body = {
        "apiVersion": "kvant.dev/v1alpha1",
        "kind": "QuantizedModel",
        "metadata": {"name": "tiny", "namespace": "default", "uid": "u1"},
        "spec": {**CPU_SPEC, "serving": {**CPU_SPEC["serving"], "image": "lmsysorg/sglang:v0.5.23-xeon"}},
    }
    objects = render_offline(body, tiny_checkpoint("llama"), "default")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"] == {
        "requests": {"cpu": "2", "memory": "6144Mi"},
        "limits": {"memory": "6144Mi"},
    }
    launch = parse_spec_json(engine["args"][engine["args"].index("--spec-json") + 1])
    assert (launch.device, launch.memFractionStatic) == ("cpu", None)
    assert launch.maxTotalTokens == MIB // 512  # kvCacheMiB 1 at the tiny Llama's 512 B per token (bf16)
