"""`kvant convert --method gptq` writes the RTN artifact's format (same tensors, dtypes, shapes, config),
with other codes in every quantized weight; transformers loads it, and the manifest says it is GPTQ."""

import torch
from transformers import AutoModelForCausalLM

from kvant_runtime.convert.converter import Job, run
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.gptq.gptq_settings import GptqSettings
from kvant_runtime.job_progress import Progress
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import quantized_modules, tensors

GROUP = 32


def gptq_recipe() -> Recipe:
    return Recipe(group_size=GROUP, method="gptq", gptq=GptqSettings(samples=4, sequence_length=64))


def test_gptq_artifact_has_rtn_format_other_codes_and_loads(tmp_path):
    source = tiny_checkpoint("llama")
    gptq = run(Job(source, tmp_path / "gptq", gptq_recipe(), threads=2), Progress(human=None))
    rtn = run(Job(source, tmp_path / "rtn", Recipe(group_size=GROUP), threads=2), Progress(human=None))
    assert gptq is not None and rtn is not None

    assert gptq["recipe"]["method"] == "gptq" and gptq["recipe"]["gptq"]["samples"] == 4
    assert rtn["recipe"]["method"] == "rtn" and "gptq" not in rtn["recipe"]
    assert (tmp_path / "gptq" / "config.json").read_bytes() == (tmp_path / "rtn" / "config.json").read_bytes()

    ours, theirs = tensors(tmp_path / "gptq"), tensors(tmp_path / "rtn")
    assert {n: (t.dtype, t.shape) for n, t in ours.items()} == {
        n: (t.dtype, t.shape) for n, t in theirs.items()
    }
    quantized = quantized_modules(tmp_path / "gptq")
    assert len(quantized) == 2 * 7
    for name in ours:
        if name.rsplit(".", 1)[0] in quantized and name.endswith(".weight_packed"):
            assert not torch.equal(ours[name], theirs[name]), f"{name}: GPTQ left RTN's codes"
        elif not name.endswith((".weight_scale", ".weight_shape")):
            assert torch.equal(ours[name], theirs[name]), f"{name}: unquantized tensors are copied"

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "gptq", dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(torch.arange(3, 60).unsqueeze(0)).logits
    assert torch.isfinite(logits).all()
