"""The fused LoRA forward (``policy.fused_lora_forward``): peft's function, one addmm per adapter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from advrag.engines.local.dual import shared_lora_policies
from advrag.engines.local.policy import (
    LoraSettings,
    TrainablePolicy,
    fused_lora_forward,
    lora_linear_layers,
    with_fused_lora_forward,
)
from advrag.models.loading import load_policy

IDS = torch.tensor([[5, 17, 42, 9, 33, 61, 7, 12], [8, 3, 27, 50, 11, 2, 40, 19]])


@contextmanager
def peft_own_forward(model: nn.Module) -> Iterator[None]:
    """Run every LoRA layer of ``model`` through peft's forward for the body."""
    layers = lora_linear_layers(model)
    fused = [layer.__dict__.pop("forward") for layer in layers]
    try:
        yield
    finally:
        for layer, forward in zip(layers, fused, strict=True):
            layer.forward = forward


def randomise_b(model: nn.Module) -> None:
    """peft starts every B at 0; give them values so the adapters change the output."""
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(param, std=0.1)


def logits_and_grads(model: nn.Module, autocast: bool = False):
    """Logits of ``IDS`` and the gradients of a fixed loss on them (then cleared)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=IDS).logits.float()
    logits.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logits.detach(), grads


@pytest.fixture
def policy(tiny_policy_dir) -> TrainablePolicy:
    """The tiny model with LoRA r=4, alpha=7: a scaling of 1.75, not a power of two."""
    policy = TrainablePolicy(load_policy(str(tiny_policy_dir)).model,
                             lora=LoraSettings(r=4, alpha=7), keep_reference=False)
    randomise_b(policy.model)
    return policy


def test_every_lora_layer_runs_the_fused_forward_and_computes_peft_s_function(policy):
    layers = lora_linear_layers(policy.model)
    assert layers and all(layer.forward.__func__ is fused_lora_forward for layer in layers)
    fused, fused_grads = logits_and_grads(policy.model)
    with peft_own_forward(policy.model):
        plain, plain_grads = logits_and_grads(policy.model)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    assert fused_grads.keys() == plain_grads.keys() and all("lora_" in n for n in plain_grads)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-7)


def test_under_bf16_the_fused_sum_is_as_close_to_fp32_as_peft_s(policy):
    """One rounding of base + scaling·BA instead of two: within bf16's noise of peft's error."""
    exact, exact_grads = logits_and_grads(policy.model)

    def error(autocast_run) -> tuple[float, float]:
        """Relative error of the logits and of all gradients together, against fp32."""
        logits, grads = autocast_run
        grad_error = sum((grads[n] - g).square().sum() for n, g in exact_grads.items())
        grad_norm = sum(g.square().sum() for g in exact_grads.values())
        return float((logits - exact).norm() / exact.norm()), float((grad_error / grad_norm).sqrt())

    fused = error(logits_and_grads(policy.model, autocast=True))
    with peft_own_forward(policy.model):
        plain = error(logits_and_grads(policy.model, autocast=True))
    assert 0 < plain[0] < 0.05 and 0 < plain[1] < 0.1  # autocast ran: bf16-sized errors
    assert fused[0] <= 2 * plain[0] and fused[1] <= 2 * plain[1]


def test_disabled_and_merged_adapters_go_through_peft_s_own_forward(policy):
    with policy.model.disable_adapter():
        disabled = policy.model(input_ids=IDS).logits
        with peft_own_forward(policy.model):
            assert torch.equal(disabled, policy.model(input_ids=IDS).logits)
    base_model = policy.model.get_base_model()
    policy.model.merge_adapter()
    merged = base_model(input_ids=IDS).logits
    with peft_own_forward(policy.model):
        assert torch.equal(merged, base_model(input_ids=IDS).logits)
    policy.model.unmerge_adapter()


def test_dora_layers_go_through_peft_s_own_forward(tiny_policy_dir):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_policy(str(tiny_policy_dir)).model,
                           LoraConfig(r=4, lora_alpha=8, use_dora=True, target_modules="all-linear"))
    randomise_b(model)
    with_fused_lora_forward(model)
    with torch.no_grad():
        fused = model(input_ids=IDS).logits
        with peft_own_forward(model):
            assert torch.equal(fused, model(input_ids=IDS).logits)


def test_shared_adapters_each_compute_their_own_output(tiny_policy_dir):
    """ARR's agents share one base: the fused forward follows whichever adapter is active."""
    policies = shared_lora_policies(load_policy(str(tiny_policy_dir)).model,
                                    LoraSettings(r=4, alpha=8))
    model = next(iter(policies.values())).model
    randomise_b(model)
    outputs = {}
    with torch.no_grad():
        for name in policies:
            model.set_adapter(name)
            outputs[name] = model(input_ids=IDS).logits
            with peft_own_forward(model):
                torch.testing.assert_close(outputs[name], model(input_ids=IDS).logits,
                                           rtol=1e-5, atol=1e-6)
    reasoner, verifier = outputs.values()
    assert not torch.allclose(reasoner, verifier)


def test_a_bf16_base_with_fp32_adapters_goes_through_peft_s_own_forward(policy):
    """Without autocast peft adds an fp32 adapter output to a bf16 base output in fp32."""
    layer = lora_linear_layers(policy.model)[0]
    layer.base_layer.to(torch.bfloat16)
    x = torch.randn(3, layer.in_features, dtype=torch.bfloat16)
    with torch.no_grad():
        fused = layer(x)
        with peft_own_forward(policy.model):
            assert torch.equal(fused, layer(x))
    assert fused.dtype == torch.bfloat16
