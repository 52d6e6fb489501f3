"""MoE routed experts: each expert's Hessian sums only the tokens the router sent to it (and, for its
down projection, what its gate and up made of them); an expert under the token threshold keeps RTN,
and the count is reported."""

import io
import json

import torch

from kvant_contracts.int4_artifact import TargetRule
from kvant_runtime.checkpoint.layer_stream import LayerStream
from kvant_runtime.convert.converter import Job, run
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.gptq.gptq_settings import GptqSettings
from kvant_runtime.gptq.hessians import collecting
from kvant_runtime.gptq.layer_targets import layer_targets
from kvant_runtime.job_progress import Progress
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import tensors

EXPERTS, TOP_K = 4, 2


def test_expert_hessians_sum_exactly_the_routed_tokens():
    source = tiny_checkpoint("deepseek_v3")
    stream = LayerStream(source, torch.device("cpu"), torch.float32)
    generator = torch.Generator().manual_seed(0)
    samples = [torch.randint(0, 256, (48,), generator=generator) for _ in range(3)]
    try:
        with stream.layer(0) as dense:
            hidden = stream.run_layer(dense, stream.embed(samples), None)
        stored = set(json.loads((source / "model.safetensors.index.json").read_text())["weight_map"])
        with stream.layer(1) as layer:
            targets, groups = layer_targets(layer, "model.layers.1", TargetRule("experts"), stored)
            seen: dict[str, list[torch.Tensor]] = {"inputs": [], "chosen": []}
            layer.get_submodule("mlp").register_forward_pre_hook(
                lambda _m, args: seen["inputs"].append(args[0])
            )
            router = layer.get_submodule("mlp.gate")
            router.register_forward_hook(lambda _m, _i, out: seen["chosen"].append(out[2]))
            with collecting(layer, "model.layers.1", targets, groups) as sums:
                stream.run_layer(layer, hidden, None)
            experts = layer.get_submodule("mlp.experts")
            inputs = torch.cat([x.reshape(-1, x.shape[-1]) for x in seen["inputs"]])
            chosen = torch.cat(seen["chosen"])
            (group,) = groups
            assert {t.name for t in targets} == {
                f"model.layers.1.mlp.experts.{e}.{p}.weight"
                for e in range(EXPERTS)
                for p in ("gate_proj", "up_proj", "down_proj")
            }
            counts = []
            for e in range(EXPERTS):
                routed = inputs[(chosen == e).any(dim=-1)]
                into, down = sums[group.input_key(e)], sums[group.down_key(e)]
                counts.append(into.tokens)
                assert into.tokens == routed.shape[0]
                torch.testing.assert_close(into.sum, routed.T @ routed, rtol=1e-4, atol=1e-4)
                gate_up = experts.get_parameter("gate_up_proj")[e]
                gate, up = torch.nn.functional.linear(routed, gate_up).chunk(2, dim=-1)
                made = experts.get_submodule("act_fn")(gate) * up
                torch.testing.assert_close(down.sum, made.T @ made, rtol=1e-4, atol=1e-4)
            assert sum(counts) == inputs.shape[0] * TOP_K and len(set(counts)) > 1
    finally:
        stream.close()


def convert(source, output, recipe) -> tuple[dict, str]:
    said = io.StringIO()
    manifest = run(Job(source, output, recipe, threads=2), Progress(human=said))
    assert manifest is not None
    return manifest, said.getvalue()


def test_under_sampled_experts_keep_rtn_and_are_counted(tmp_path):
    source = tiny_checkpoint("deepseek_v3")
    rtn, _ = convert(source, tmp_path / "rtn", Recipe(group_size=32, targets="experts"))

    settings = GptqSettings(samples=4, sequence_length=64, min_expert_tokens=10**6)
    all_rtn, said = convert(source, tmp_path / "all-rtn", Recipe("int4", 32, "experts", (), "gptq", settings))
    assert "GPTQ layer 2/2: 0 weights by GPTQ, 4 experts kept RTN (under 1000000 routed tokens)" in said
    assert "GPTQ done: 0 weights by GPTQ, 4 experts kept RTN" in said
    assert all_rtn["digest"] == rtn["digest"], "experts kept RTN are RTN's bytes"

    settings = GptqSettings(samples=4, sequence_length=64, min_expert_tokens=1)
    _, said = convert(source, tmp_path / "gptq", Recipe("int4", 32, "experts", (), "gptq", settings))
    assert "GPTQ layer 2/2: 12 weights by GPTQ" in said and "kept RTN" not in said.split("GPTQ done")[0]
    ours, theirs = tensors(tmp_path / "gptq"), tensors(tmp_path / "rtn")
    for e in range(EXPERTS):
        name = f"model.layers.1.mlp.experts.{e}.down_proj.weight_packed"
        assert not torch.equal(ours[name], theirs[name]), name
