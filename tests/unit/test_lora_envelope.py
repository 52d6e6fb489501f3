"""spec.serving.lora, the adapter pool of every engine (issue #42, items 1-3 as far as the pool goes):
its bytes on each GPU equal what SGLang 0.5.23's own shape functions allocate, the plan takes them
out of the KV cache, the engine's command line carries the pool's flags and SGLang's parser reads
them, and what SGLang or the planner cannot run is refused naming the field.

The comparison with SGLang runs SGLang's LoRAMemoryPool shape functions in SGLang's environment
(tests/sglang_lora_pool.py), which `make tools` builds: that test is marked `cluster`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kvant_cli.main import main
from kvant_contracts.launch_spec import LaunchSpec, SpecError, parse_spec_json
from kvant_contracts.lora import DEFAULT_TARGETS, LoraEnvelope, LoraTarget
from kvant_dev.toolchain import ENGINE_ENVIRONMENT, built_environment
from kvant_operator.api.spec import ServingSpec
from kvant_operator.planner import PlanRequest, load_checkpoint, make_plan
from kvant_operator.planner.architecture import parse_shape
from kvant_operator.planner.lora_pool import lora_pool
from kvant_operator.render.jobs import plan_args, plan_inputs, plan_job_name
from kvant_runtime.launch.argv import checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.validate import SGLangRejected, validate_argv
from kvant_runtime.sim import sim_command
from tests.unit.launch_fixtures import checkpoint
from tests.unit.planner_configs import deepseek_v3, llama_3_1_70b, write_config
from tests.unit.render_inputs import body, engine_containers, spec_of

HARNESS = Path(__file__).resolve().parents[1] / "sglang_lora_pool.py"

LLAMA_3_8B = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
# A head_dim that is not hidden_size / heads (as Qwen3's), and fewer KV heads than some TP sizes.
QWEN3_LIKE = {
    **LLAMA_3_8B,
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 28,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
}
QWEN3_MOE = {
    **QWEN3_LIKE,
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "num_experts": 8,
    "moe_intermediate_size": 768,
}
ALL = [t.value for t in DEFAULT_TARGETS]
CASES: list[tuple[dict[str, Any], int, int, int, list[str]]] = [
    (LLAMA_3_8B, 1, 16, 8, ALL),
    (LLAMA_3_8B, 2, 64, 4, ALL),
    (LLAMA_3_8B, 16, 8, 8, ALL),  # 8 KV heads on 16 ranks: each rank holds one KV head, copied
    (LLAMA_3_8B, 4, 32, 1, ["q_proj"]),  # one of the stack sizes the whole qkv_proj buffer
    (QWEN3_LIKE, 1, 16, 8, ["o_proj", "down_proj"]),
    (QWEN3_LIKE, 8, 16, 2, ["qkv_proj", "gate_up_proj"]),
    (QWEN3_LIKE, 2, 128, 3, ["v_proj", "up_proj", "o_proj"]),
]


def _sglangs_pool_bytes(cases: list[dict[str, Any]]) -> list[int]:
    environment = built_environment(ENGINE_ENVIRONMENT)
    assert environment is not None, "SGLang's environment is not built: run `make tools`"
    done = subprocess.run(
        [str(environment / "bin" / "python"), str(HARNESS)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [answer["bytes"] for answer in json.loads(done.stdout)]


@pytest.mark.cluster
def test_the_plans_pool_is_what_sglang_allocates():
    cases = [
        {"config": config, "tp": tp, "rank": rank, "slots": slots, "targets": targets}
        for config, tp, rank, slots, targets in CASES
    ]
    sglang = _sglangs_pool_bytes(cases)
    assert len(sglang) == len(CASES) and all(b > 0 for b in sglang)
    for (config, tp, rank, slots, targets), theirs in zip(CASES, sglang, strict=True):
        envelope = LoraEnvelope(max_rank=rank, targets=tuple(LoraTarget(t) for t in targets), slots=slots)
        ours = lora_pool(parse_shape(config), envelope, tp)
        assert ours.refusal is None
        assert ours.bytes_per_gpu == theirs, (config["model_type"], tp, rank, slots, targets)
    # The worked example of docs/design/adapters-research.md: Llama-3-8B, 8 slots of rank 16, 640 MiB.
    assert sglang[0] == 640 << 20


def test_the_pool_comes_out_of_the_kv_cache(tmp_path: Path):
    checkpoint_ = load_checkpoint(write_config(tmp_path, llama_3_1_70b()))
    request = PlanRequest(gpu_memory_gib=141, tensor_parallel=8)
    without = make_plan(checkpoint_, request)
    envelope = LoraEnvelope(max_rank=64)
    with_pool = make_plan(checkpoint_, replace(request, lora=envelope))
    pool = lora_pool(checkpoint_.shape, envelope, 8).bytes_per_gpu
    assert with_pool.lora_pool_bytes_per_gpu == pool > 0 and without.lora_pool_bytes_per_gpu is None
    cell = without.kv_bytes_per_token_per_gpu
    # What SGLang measures after the weights and the pool, over one KV cell; one token of rounding.
    assert abs((without.kv_tokens_per_replica - with_pool.kv_tokens_per_replica) - pool // cell) <= 1
    status = with_pool.to_status().model_dump(mode="json", by_alias=True, exclude_none=True)
    assert status["loraPoolBytesPerGPU"] == pool
    assert "loraPoolBytesPerGPU" not in without.to_status().model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def test_a_pool_that_leaves_no_kv_cache_does_not_fit(tmp_path: Path):
    checkpoint_ = load_checkpoint(write_config(tmp_path, llama_3_1_70b()))
    huge = LoraEnvelope(max_rank=512, slots=64)
    planned = make_plan(checkpoint_, PlanRequest(gpu_memory_gib=141, tensor_parallel=8, lora=huge))
    assert not planned.fits
    assert any("spec.serving.lora" in warning for warning in planned.warnings), planned.warnings


def test_mla_and_expert_targets_are_refused_in_the_plan(tmp_path: Path):
    mla = load_checkpoint(write_config(tmp_path / "mla", deepseek_v3()))
    planned = make_plan(
        mla, PlanRequest(gpu_memory_gib=141, tensor_parallel=8, lora=LoraEnvelope(max_rank=16))
    )
    assert not planned.fits and planned.warnings[0].startswith("spec.serving.lora: ")
    assert "MLA" in planned.warnings[0]
    moe = load_checkpoint(write_config(tmp_path / "moe", QWEN3_MOE))
    experts = make_plan(moe, PlanRequest(gpu_memory_gib=80, lora=LoraEnvelope(max_rank=16)))
    assert not experts.fits and experts.warnings[0].startswith("spec.serving.lora.targetModules: ")
    assert "down_proj" in experts.warnings[0] and "gate_up_proj" in experts.warnings[0]
    attention = LoraEnvelope(max_rank=16, targets=(LoraTarget.Q_PROJ, LoraTarget.V_PROJ, LoraTarget.O_PROJ))
    assert make_plan(moe, PlanRequest(gpu_memory_gib=80, lora=attention)).fits


def test_every_engine_starts_with_the_pool_and_sglangs_parser_reads_it(tmp_path: Path):
    lora = {"maxRank": 32, "targetModules": ["q_proj", "v_proj", "down_proj"], "slots": 4, "maxLoaded": 12}
    containers = engine_containers("llama-70b-prefill-decode-fp8kv.yaml", {"lora": lora})
    assert len(containers) == 2  # both roles
    folder = checkpoint(tmp_path, "gqa", "bf16")
    for engine in containers:
        launch = parse_spec_json(engine["args"][2])
        assert launch.lora == LoraEnvelope(
            max_rank=32,
            targets=(LoraTarget.Q_PROJ, LoraTarget.V_PROJ, LoraTarget.DOWN_PROJ),
            slots=4,
            max_loaded=12,
        )
        local = LaunchSpec(**{**launch.__dict__, "modelPath": str(folder), "weightsFormat": "bf16"})
        argv = kvant_argv(local, checkpoint_quant_method(folder)) + list(local.engineArgs)
        args = validate_argv(argv, list(local.engineArgs))
        assert args.enable_lora is True
        assert (args.max_lora_rank, args.max_loras_per_batch, args.max_loaded_loras) == (32, 4, 12)
        assert set(args.lora_target_modules) == {"q_proj", "v_proj", "down_proj"}


def test_a_model_without_a_pool_renders_no_trace_of_one():
    containers = engine_containers("llama-70b-prefill-decode-fp8kv.yaml", {})
    assert len(containers) == 2
    for engine in containers:
        text = engine["args"][2]
        assert "lora" not in text and parse_spec_json(text).lora is None


def test_the_launch_spec_keeps_the_pool_and_refuses_a_broken_one():
    spec = LaunchSpec(
        modelPath="/m", servedModelName="m", weightsFormat="bf16", lora=LoraEnvelope(max_rank=8)
    )
    assert parse_spec_json(spec.to_json()) == spec
    raw = json.loads(spec.to_json())
    for broken, named in [
        ({"maxRank": 0}, "lora.maxRank"),
        ({"targetModules": ["lm_head"], "maxRank": 8}, "lora.targetModules"),
        ({"maxRank": 8, "slots": 8, "maxLoaded": 2}, "lora.maxLoaded"),
        ({"maxRank": 8, "ranks": 2}, "unknown fields"),
        ("on", "lora must be an object"),
    ]:
        with pytest.raises(SpecError, match=named):
            parse_spec_json(json.dumps({**raw, "lora": broken}))


def test_the_launcher_refuses_a_pool_on_sglangs_cpu_backend(tmp_path: Path):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = LaunchSpec(
        modelPath=str(folder),
        servedModelName="m",
        weightsFormat="bf16",
        device="cpu",
        lora=LoraEnvelope(max_rank=8),
    )
    with pytest.raises(SpecError, match="pin host memory"):
        kvant_argv(spec, None, amx=True)


@pytest.mark.parametrize(
    ("serving", "named"),
    [
        ({"lora": {"maxRank": 0}}, "lora.maxRank"),
        ({"lora": {"maxRank": 513}}, "lora.maxRank"),
        ({"lora": {}}, "lora.maxRank"),
        ({"lora": {"maxRank": 16, "targetModules": ["lm_head"]}}, "lora.targetModules"),
        ({"lora": {"maxRank": 16, "targetModules": []}}, "lora.targetModules"),
        ({"lora": {"maxRank": 16, "slots": 0}}, "lora.slots"),
        ({"lora": {"maxRank": 16, "slots": 8, "maxLoaded": 4}}, "spec.serving.lora.maxLoaded"),
        (
            {"device": "cpu", "gpu": None, "cpu": {"memoryGiB": 8}, "lora": {"maxRank": 16}},
            "spec.serving.lora needs",
        ),
        ({"engineArgs": ["--enable-lora"]}, "spec.serving.engineArgs"),
        ({"engineArgs": ["--lora-paths=a=/x"]}, "spec.serving.engineArgs"),
    ],
)
def test_an_adapter_pool_sglang_would_not_run_is_refused_naming_the_field(
    serving: dict[str, Any], named: str
):
    fields = {"gpu": {"memoryGiB": 80}, **serving}
    fields = {key: value for key, value in fields.items() if value is not None}
    with pytest.raises(ValidationError, match=re.escape(named)):
        ServingSpec.model_validate(fields)


def test_the_simulator_takes_a_pool_on_either_device():
    spec = ServingSpec.model_validate(
        {"engine": "simulator", "device": "cpu", "cpu": {"memoryGiB": 8}, "lora": {"maxRank": 16}}
    )
    assert spec.lora is not None and spec.lora.envelope().targets == DEFAULT_TARGETS


def test_an_engine_arg_that_sets_the_pool_is_refused_by_the_launcher_too():
    with pytest.raises(SGLangRejected, match=re.escape("spec.serving.lora")):
        validate_argv(["--model-path", "/m", "--max-lora-rank", "8"], ["--max-lora-rank", "8"])


def test_the_simulator_starts_with_the_same_pool_flags():
    (engine,) = engine_containers(
        "tiny.yaml", {"lora": {"maxRank": 8, "targetModules": ["q_proj"], "slots": 2}}
    )
    args = engine["args"]
    assert args[0] == "sim"
    at = args.index("--enable-lora")
    assert args[at:] == [
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--lora-target-modules",
        "q_proj",
        "--max-loras-per-batch",
        "2",
    ]
    parser = argparse.ArgumentParser()
    sim_command.register(parser.add_subparsers())
    parsed = parser.parse_args(args)
    assert sim_command._lora_envelope(parsed) == LoraEnvelope(
        max_rank=8, targets=(LoraTarget.Q_PROJ,), slots=2
    )


def test_the_operators_plan_job_plans_the_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The operator's plan comes from the plan Job's `kvant plan` argv, not from the spec in process:
    that argv carries the pool, and a pool edit is a new plan input (a new Job)."""
    write_config(tmp_path, LLAMA_3_8B)
    lora = {"maxRank": 32, "targetModules": ["q_proj", "o_proj"], "slots": 4, "maxLoaded": 9}
    with_pool = spec_of(body("tiny.yaml", serving={**body("tiny.yaml")["spec"]["serving"], "lora": lora}))
    without = spec_of(body("tiny.yaml"))
    assert "lora" not in plan_inputs(without)  # a model without a pool keeps its plan Job's name
    assert plan_job_name("tiny", with_pool) != plan_job_name("tiny", without)
    assert main(plan_args(with_pool, str(tmp_path))) == 0
    planned = json.loads(capsys.readouterr().out)
    in_process = make_plan(load_checkpoint(tmp_path), PlanRequest.from_spec(with_pool))
    assert in_process.lora_pool_bytes_per_gpu
    assert planned["lora_pool_bytes_per_gpu"] == in_process.lora_pool_bytes_per_gpu
    assert planned["kv_tokens_per_replica"] == in_process.kv_tokens_per_replica
    # maxLoaded sizes no memory: changing it plans nothing again.
    lora_more = {**lora, "maxLoaded": 20}
    more = spec_of(body("tiny.yaml", serving={**body("tiny.yaml")["spec"]["serving"], "lora": lora_more}))
    assert plan_job_name("tiny", more) == plan_job_name("tiny", with_pool)
