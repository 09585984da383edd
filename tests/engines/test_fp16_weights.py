"""fp16-weight sampling on the CPU (``hf-fp16``): every linear layer of a copy computes with its
weight rounded to fp16 (fbgemm's kernels, fp32 activations), pushes refresh it, and ``auto``
picks it for an fp32 policy where vLLM cannot run it."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
from test_snapshot_generator import PROMPTS, Q_PROJ, greedy, lora_policy
from torch import nn

from advrag.engines.generators import make_generator, resolve_backend
from advrag.engines.local import generation
from advrag.engines.local.generation import (
    HFGenerator,
    PackedFp16Linear,
    SnapshotGenerator,
    pack_fp16_weights,
)
from advrag.models.loading import load_policy

pytestmark = pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines,
    reason="fp16-weight kernels are fbgemm's (x86 builds of torch)",
)


def rounded_to_fp16(model: nn.Module) -> nn.Module:
    """An fp32 copy of ``model`` whose linear weights are rounded to fp16 (biases stay fp32, as
    fbgemm keeps them): what the packed layers compute, worked out with plain fp32 matmuls."""
    clone = copy.deepcopy(model)
    for module in clone.modules():
        if type(module) is nn.Linear:  # new parameters: a tied lm_head leaves the embedding exact
            module.weight = nn.Parameter(module.weight.detach().half().float())
    return clone


def logits(model: nn.Module, tokenizer) -> torch.Tensor:
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def test_packed_layers_compute_with_fp16_rounded_weights(tiny_policy_dir):
    loaded = load_policy(str(tiny_policy_dir))
    reference = rounded_to_fp16(loaded.model)
    names = [name for name, _ in loaded.model.named_parameters()]
    packed = pack_fp16_weights(loaded.model)
    linears = [m for m in packed.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is PackedFp16Linear for m in linears)
    assert [name for name, _ in packed.named_parameters()] == names  # fp32 weights kept
    exact = logits(load_policy(str(tiny_policy_dir)).model, loaded.tokenizer)
    rounded, got = logits(reference, loaded.tokenizer), logits(packed, loaded.tokenizer)
    off_rounded, off_exact = (got - rounded).abs().max(), (got - exact).abs().max()
    assert off_rounded < 1e-5 < off_exact  # the rounded weights, up to summation order


def test_a_model_that_is_not_fp32_is_refused_and_left_as_it_was(tiny_policy_dir):
    model = load_policy(str(tiny_policy_dir)).model
    model.lm_head.to(torch.bfloat16)
    with pytest.raises(ValueError, match="fp32 CPU model, got a torch.bfloat16 weight"):
        pack_fp16_weights(model)
    assert not any(isinstance(m, PackedFp16Linear) for m in model.modules())


def test_hf_fp16_samples_a_merged_copy_and_push_packs_the_new_weights(tiny_policy_dir):
    model, tokenizer = lora_policy(tiny_policy_dir)
    generator = make_generator("hf-fp16", model, tokenizer, tiny_policy_dir, batch_size=4)
    assert isinstance(generator, SnapshotGenerator) and generator.dtype == torch.float16
    merged = copy.deepcopy(model).merge_and_unload().eval()
    assert torch.equal(generator.model.get_submodule(Q_PROJ).weight,
                       merged.get_submodule(Q_PROJ).weight)
    assert greedy(generator) == greedy(HFGenerator(rounded_to_fp16(merged), tokenizer))
    before = greedy(generator)
    with torch.no_grad():  # an "update" of the adapter
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.mul_(-3.0)
    assert greedy(generator) == before  # the copy changes only through push_weights
    generator.push_weights(model)
    updated = rounded_to_fp16(copy.deepcopy(model).merge_and_unload().eval())
    assert greedy(generator) == greedy(HFGenerator(updated, tokenizer)) != before


def test_a_large_matrix_is_packed_in_pieces_of_output_rows(monkeypatch):
    """With at most 50 weights a piece, a 10×16 layer (160 weights) packs as 4 pieces of 3, 3,
    2 and 2 output rows and computes what its fp16-rounded weight and fp32 bias compute."""
    monkeypatch.setattr(generation, "PACKED_PIECE_WEIGHTS", 50)
    torch.manual_seed(0)
    layer = nn.Linear(16, 10)
    model = pack_fp16_weights(nn.Sequential(layer))
    assert [w.shape[0] for w, _ in layer.pieces()] == [3, 3, 2, 2]
    assert len(layer.packed) == 4
    inputs = torch.randn(5, 16)
    expected = inputs @ layer.weight.detach().half().float().T + layer.bias.detach()
    torch.testing.assert_close(model(inputs), expected, rtol=0, atol=1e-5)


def test_a_push_packs_exactly_the_layers_whose_weights_changed(tiny_policy_dir):
    """A full fine-tune's update of the embedding (tied to the LM head) and of one projection:
    those two layers are packed again, the others keep their packing."""
    loaded = load_policy(str(tiny_policy_dir))
    model = loaded.model
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied
    generator = SnapshotGenerator(model, loaded.tokenizer, dtype=torch.float16)
    before = {name: m.packed for name, m in generator.model.named_modules()
              if isinstance(m, PackedFp16Linear)}
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(1.5)
        model.get_submodule(Q_PROJ).weight.add_(0.1)
    generator.push_weights(model)
    repacked = {name for name, m in generator.model.named_modules()
                if isinstance(m, PackedFp16Linear) and m.packed is not before[name]}
    assert repacked == {"lm_head", Q_PROJ}
    torch.testing.assert_close(logits(generator.model, loaded.tokenizer),
                               logits(rounded_to_fp16(model), loaded.tokenizer),
                               rtol=0, atol=1e-5)


def test_hf_fp16_needs_a_policy_computing_in_fp32(tiny_policy_dir):
    loaded = load_policy(str(tiny_policy_dir))
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    with pytest.raises(ValueError, match="computes in bfloat16: use 'hf'"):
        make_generator("hf-fp16", loaded.model, loaded.tokenizer, tiny_policy_dir, autocast=bf16)


def test_auto_picks_fp16_weights_for_an_fp32_policy_without_vllm(tiny_policy_dir, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    model = load_policy(str(tiny_policy_dir)).model
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    assert resolve_backend("auto", model) == "hf-fp16"
    assert resolve_backend("auto", model, bf16) == "hf"  # a bf16 copy instead
    assert resolve_backend("hf", model) == "hf"


def test_a_float16_benchmark_on_the_cpu_packs_fp32_weights(tiny_policy_dir, monkeypatch):
    from advrag.config import BenchmarkConfig
    from advrag.tasks.benchmark import load_generator

    monkeypatch.setenv("ADVRAG_DEVICE", "cpu")
    config = BenchmarkConfig(model=str(tiny_policy_dir), dtype="float16", methods=["cot"])
    reasoner = load_generator.fn(config).reasoner
    layers = [m for m in reasoner.model.modules() if isinstance(m, nn.Linear)]
    assert layers and all(type(m) is PackedFp16Linear for m in layers)
    assert {p.dtype for p in reasoner.model.parameters()} == {torch.float32}
    exact = load_generator.fn(config.model_copy(update={"dtype": "float32"})).reasoner
    assert not any(isinstance(m, PackedFp16Linear) for m in exact.model.modules())
