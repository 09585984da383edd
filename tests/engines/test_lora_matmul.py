"""The LoRA linear op (``advrag.engines.local.lora_matmul``): its function and gradients."""

from __future__ import annotations

import pytest
import torch

from advrag.engines.local.lora_matmul import lora_linear

SCALE = 1.75  # alpha / r of the fused-forward tests: not a power of two


def operands(tokens=37, features_in=24, features_out=40, rank=4, dtype=torch.float32):
    """x (batch 1, tokens, in), a frozen W, and fp32 adapters A, B as peft keeps them."""
    torch.manual_seed(tokens)
    x = torch.randn(1, tokens, features_in, dtype=dtype, requires_grad=True)
    weight = torch.randn(features_out, features_in, dtype=dtype)
    lora_a = torch.randn(rank, features_in, requires_grad=True)
    lora_b = torch.randn(features_out, rank, requires_grad=True)
    return x, weight, lora_a, lora_b


def reference(x, weight, lora_a, lora_b):
    """peft's LoRA linear forward, written out: base(x) + scaling·B(A(x))."""
    return x @ weight.t() + SCALE * (x @ lora_a.t()) @ lora_b.t()


def grads(out, leaves, grad_out):
    return torch.autograd.grad(out, leaves, grad_out)


def test_fp32_output_and_gradients_are_peft_s_function():
    x, weight, lora_a, lora_b = operands()
    grad_out = torch.randn(1, 37, 40)
    out = lora_linear(x, weight, lora_a, lora_b, SCALE, torch.float32)
    expected = reference(x, weight, lora_a, lora_b)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads(out, (x, lora_a, lora_b), grad_out),
                         grads(expected, (x, lora_a, lora_b), grad_out), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_bf16_gradients_are_as_close_to_fp32_as_autograd_s():
    """Computed in bf16 (fp32 adapters cast, as autocast does), each result's error against
    fp32 is no larger than that of autograd over the same bf16 matmuls."""
    x, weight, lora_a, lora_b = operands(tokens=300, features_in=96, features_out=160, rank=16)
    grad_out = torch.randn(1, 300, 160)
    exact = reference(x, weight, lora_a, lora_b)
    exact_grads = grads(exact, (x, lora_a, lora_b), grad_out)
    bf16 = torch.bfloat16
    ours = lora_linear(x, weight.to(bf16), lora_a, lora_b, SCALE, bf16)
    ours_grads = grads(ours, (x, lora_a, lora_b), grad_out.to(bf16))
    with torch.autocast("cpu", dtype=bf16):
        autograd_out = reference(x, weight.to(bf16), lora_a, lora_b)
    autograd_grads = grads(autograd_out, (x, lora_a, lora_b), grad_out.to(bf16))

    def error(got, want):
        return ((got.float() - want).norm() / want.norm()).item()

    assert ours.dtype == bf16 and all(g.dtype == torch.float32 for g in ours_grads)
    assert 0 < error(ours, exact) <= 1.1 * error(autograd_out, exact)
    for got, by_autograd, want in zip(ours_grads, autograd_grads, exact_grads, strict=True):
        assert 0 < error(got, want) <= max(1.1 * error(by_autograd, want), 1e-3)


def test_no_input_gradient_is_computed_where_none_is_wanted():
    x, weight, lora_a, lora_b = operands()
    x = x.detach()
    out = lora_linear(x, weight, lora_a, lora_b, SCALE, torch.float32)
    with torch.profiler.profile() as profiler:
        out.sum().backward()
    assert x.grad is None and lora_a.grad is not None and lora_b.grad is not None
    matmuls = sum(e.count for e in profiler.key_averages() if e.key == "aten::mm")
    assert matmuls == 3  # ∂h = ∂out·B, ∂A, ∂B; not ∂h·A nor ∂out·W


def test_the_base_weight_gets_no_gradient_and_leading_dimensions_are_kept():
    x, weight, lora_a, lora_b = operands()
    weight.requires_grad_()
    out = lora_linear(x, weight, lora_a, lora_b, SCALE, torch.float32)
    out.sum().backward()
    assert out.shape == (1, 37, 40) and weight.grad is None


@pytest.mark.usefixtures("cxx_compiler")
def test_compiled_it_stays_one_call_with_eager_s_gradients():
    x, weight, lora_a, lora_b = operands()
    grad_out = torch.randn(1, 37, 40)

    def layer(x, lora_a, lora_b):
        return torch.relu(lora_linear(x, weight, lora_a, lora_b, SCALE, torch.float32))

    eager = grads(layer(x, lora_a, lora_b), (x, lora_a, lora_b), grad_out)
    compiled_layer = torch.compile(layer, fullgraph=True)
    grads(compiled_layer(x, lora_a, lora_b), (x, lora_a, lora_b), grad_out)  # compiles
    with torch.profiler.profile() as profiler:
        compiled = grads(compiled_layer(x, lora_a, lora_b), (x, lora_a, lora_b), grad_out)
    calls = {e.key: e.count for e in profiler.key_averages()}
    assert calls.get("advrag::lora_linear") == 1 and calls.get("advrag::lora_linear_backward") == 1
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want)
