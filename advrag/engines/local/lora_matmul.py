"""A LoRA linear map, ``x·Wᵀ + s·(x·Aᵀ)·Bᵀ``, as one torch custom op with its own backward.

Autograd of the three matmuls (``fused_lora_forward`` before this op) and
inductor's lowering of them lose time on the rank-``r`` products, which read or
write a whole ``(tokens, features)`` tensor for few FLOPs: autograd takes the
adapters' weight gradients from transposed views (``gᵀ·x`` with ``g``
column-major runs at half speed in oneDNN, ``hᵀ·∂out`` at a half to a third),
and inductor turns the in-place ``addmm_`` into a copy of the base output
before the sum. Here the backward computes each gradient from contiguous rank-``r``
operands, and a compiled update keeps both halves as single opaque calls.

Same function, same roundings as ``fused_lora_forward`` did: the base output
rounded to the compute dtype, then ``s·h·Bᵀ`` added into it by one ``addmm_``;
gradients from bf16 (or whatever the operands are) matmuls with fp32 sums.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("advrag::lora_linear", mutates_args=())
def lora_forward(x: Tensor, weight: Tensor, lora_a: Tensor, lora_b: Tensor,
                 scale: float) -> tuple[Tensor, Tensor]:
    """Rows ``x (tokens, in)``: the output ``x·Wᵀ + scale·h·Bᵀ`` and the inner ``h = x·Aᵀ``
    (``(tokens, r)``, kept for the backward)."""
    inner = x @ lora_a.t().contiguous()
    out = x @ weight.t()
    out.addmm_(inner, lora_b.t(), alpha=scale)
    return out, inner


@lora_forward.register_fake
def _(x, weight, lora_a, lora_b, scale):
    return x.new_empty(x.shape[0], weight.shape[0]), x.new_empty(x.shape[0], lora_a.shape[0])


@torch.library.custom_op("advrag::lora_linear_backward", mutates_args=())
def lora_backward(grad: Tensor, x: Tensor, inner: Tensor, weight: Tensor, lora_a: Tensor,
                  lora_b: Tensor, scale: float, input_grad: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``lora_forward`` for ``x`` (empty unless ``input_grad``), A and B."""
    inner_grad = grad @ lora_b  # ∂h = s·∂out·B, (tokens, r)
    inner_grad.mul_(scale)
    if input_grad:
        x_grad = inner_grad @ lora_a
        x_grad.addmm_(grad, weight)
    else:
        x_grad = x.new_empty(0)
    a_grad = inner_grad.t().contiguous() @ x
    b_grad = (inner.t().contiguous() @ grad).t().contiguous()
    b_grad.mul_(scale)
    return x_grad, a_grad, b_grad


@lora_backward.register_fake
def _(grad, x, inner, weight, lora_a, lora_b, scale, input_grad):
    x_grad = x.new_empty(x.shape) if input_grad else x.new_empty(0)
    return x_grad, lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


def _save(ctx, inputs, output):
    x, weight, lora_a, lora_b, ctx.scale = inputs
    ctx.save_for_backward(x, output[1], weight, lora_a, lora_b)


def _backward(ctx, grad, _inner_grad):
    x, inner, weight, lora_a, lora_b = ctx.saved_tensors
    input_grad = ctx.needs_input_grad[0]
    x_grad, a_grad, b_grad = lora_backward(grad.contiguous(), x, inner, weight, lora_a, lora_b,
                                           ctx.scale, input_grad)
    return x_grad if input_grad else None, None, a_grad, b_grad, None


lora_forward.register_autograd(_backward, setup_context=_save)


def lora_linear(x: Tensor, weight: Tensor, lora_a: Tensor, lora_b: Tensor, scale: float,
                dtype: torch.dtype) -> Tensor:
    """``x·Wᵀ + scale·(x·Aᵀ)·Bᵀ`` over the last dimension of ``x``, computed in ``dtype`` (the
    autocast dtype, or the weights' own), through ``lora_forward``; the frozen base ``weight``
    gets no gradient."""
    rows = x.reshape(-1, x.shape[-1]).to(dtype).contiguous()
    out, _ = lora_forward(rows, weight.detach().to(dtype), lora_a.to(dtype), lora_b.to(dtype),
                          scale)
    return out.view(*x.shape[:-1], out.shape[-1])
