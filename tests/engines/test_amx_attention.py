"""The bf16 attention kernels (``advrag.engines.local.attention``) against SDPA's.

Outputs and gradients: errors against an fp32 reference no larger than SDPA's own bf16 errors (each
computes in bf16 with fp32 accumulation, so neither is exact); calls it does not cover
must be SDPA's, unchanged. The kernels' own tests run on each block math this CPU has (AVX512-BF16
dot products everywhere, AMX tiles where present). Built once per machine (about 40 s)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from advrag.engines.local import attention
from advrag.engines.local.logprobs import token_logprobs

pytestmark = pytest.mark.skipif(not attention.kernel_cpu(),
                                reason="the kernels run on CPUs with AVX512-BF16 only (AMX or "
                                       "not); elsewhere attention stays SDPA's")
SCALE = 64 ** -0.5


@pytest.fixture(scope="module", autouse=True)
def built_kernel(cxx_compiler):
    assert attention.kernel() is not None, "with a C++ compiler and ninja the kernel must build"


BLOCK_MATHS = {"avx512-bf16 dot products": False, **({"amx tiles": True} if attention.amx_tiles() else {})}


@pytest.fixture(params=list(BLOCK_MATHS))
def block_math(request, monkeypatch):
    """The kernels multiplying their blocks on each block math this CPU has."""
    tiles = BLOCK_MATHS[request.param]
    monkeypatch.setattr(attention, "amx_tiles", lambda: tiles)


def gradients(fn, tensors, grad_out):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(grad_out)
    return [leaf.grad for leaf in leaves]


def errors(got, exact):
    """Each gradient's error against fp32, relative (Frobenius norms): a max over elements
    would compare single bf16 roundings, one unit in the last place apart. Absolute where the
    exact gradient is zero (a single query's, whose one probability is 1 whatever its score)."""
    return [((g.float() - e).norm() / (e.norm() if e.norm() > 0 else 1)).item()
            for g, e in zip(got, exact, strict=True)]


@pytest.mark.parametrize("length", [1, 2, 63, 64, 65, 200, 300, 600])
def test_outputs_and_gradients_are_as_close_to_fp32_as_sdpas(length, block_math):
    torch.manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, 64, dtype=torch.bfloat16) for _ in range(3))
    grad_out = torch.randn(2, 3, length, 64, dtype=torch.bfloat16)
    ours = gradients(lambda *x: attention.causal_attention(*x, SCALE)[0], (q, k, v), grad_out)
    sdpa = gradients(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True), (q, k, v),
                     grad_out)
    exact = gradients(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True),
                      [t.float() for t in (q, k, v)], grad_out.float())
    for ours_error, sdpa_error in zip(errors(ours, exact), errors(sdpa, exact), strict=True):
        assert ours_error <= max(1.1 * sdpa_error, 1e-6)
    out, logsumexp = attention.causal_attention(q, k, v, SCALE)
    exact_out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    sdpa_out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out_error,), (sdpa_out_error,) = errors([out], [exact_out]), errors([sdpa_out], [exact_out])
    assert out_error <= max(1.1 * sdpa_out_error, 1e-6)
    scores = (q.float() @ k.float().transpose(-1, -2) * SCALE).masked_fill(
        torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(logsumexp, scores.logsumexp(-1), rtol=0, atol=1e-4)


def tiny_llama(head_size: int = 64) -> LlamaForCausalLM:
    """Two layers, 2 query heads sharing 1 key/value head (grouped-query attention)."""
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=2 * head_size, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa"))


def update_gradients(model, ids, context, compiled=False):
    model.zero_grad()
    forward = torch.compile(model, dynamic=True) if compiled else model
    with context, torch.autocast("cpu", dtype=torch.bfloat16):
        forward(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def relative_differences(a, b):
    return [((a[n] - b[n]).norm() / b[n].norm()).item() for n in b]


def backward_calls(run) -> int:
    with torch.profiler.profile() as profiler:
        run()
    return sum(e.count for e in profiler.key_averages()
               if e.key == "advrag::sequence_attention_backward")


def test_a_bf16_update_runs_the_kernel_inside_amx_attention_only():
    model, ids = tiny_llama(), torch.randint(0, 97, (2, 150))
    sdpa = update_gradients(model, ids, nullcontext())
    grads = {}
    calls = backward_calls(lambda: grads.update(
        update_gradients(model, ids, attention.amx_attention(model))))
    assert calls == 2  # one per layer
    assert model.config._attn_implementation == "sdpa"  # restored
    assert max(relative_differences(grads, sdpa)) < 0.02  # bf16-sized, not a different function
    assert max(relative_differences(grads, sdpa)) > 0  # another kernel did run
    assert backward_calls(lambda: update_gradients(model, ids, nullcontext())) == 0


def test_a_compiled_update_keeps_the_kernel_as_one_op():
    model, ids = tiny_llama(), torch.randint(0, 97, (2, 150))
    eager = update_gradients(model, ids, attention.amx_attention(model))
    update_gradients(model, ids, attention.amx_attention(model), compiled=True)  # compiles
    compiled = {}
    calls = backward_calls(lambda: compiled.update(
        update_gradients(model, ids, attention.amx_attention(model), compiled=True)))
    assert calls == 2
    assert max(relative_differences(compiled, eager)) < 0.02


def test_calls_it_does_not_cover_are_sdpas_own():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = tiny_llama(head_size=32)  # head size 32: not the kernel's
    module = model.model.layers[0].self_attn
    torch.manual_seed(1)
    q = torch.randn(1, 2, 40, 32, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, 1, 40, 32, dtype=torch.bfloat16) for _ in range(2))
    mask = torch.ones(1, 1, 40, 40, dtype=torch.bool).tril()
    for args in [(q, k, v, None), (q.detach(), k, v, None)]:
        got, _ = attention.attention_forward(module, *args, scaling=32 ** -0.5)
        want, _ = sdpa_attention_forward(module, *args, scaling=32 ** -0.5)
        assert torch.equal(got, want)
    q64 = torch.randn(1, 2, 40, 64, dtype=torch.bfloat16, requires_grad=True)
    k64, v64 = (torch.randn(1, 1, 40, 64, dtype=torch.bfloat16) for _ in range(2))
    fp32 = (q64.float(), k64.float(), v64.float())
    assert attention.covered(q64, k64, v64, None, 0.0, None)
    assert not attention.covered(q64, k64, v64, mask, 0.0, None)  # a mask
    assert not attention.covered(*fp32, None, 0.0, None)  # fp32 without autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention.covered(*fp32, None, 0.0, None)  # bf16 autocast casts them
    assert not attention.covered(q64, k64, v64, None, 0.1, None)  # dropout
    assert not attention.covered(q64, k64, v64, None, 0.0, False)  # not causal
    assert not attention.covered(q64.detach(), k64, v64, None, 0.0, None)  # no gradient wanted
    with torch.no_grad():
        assert not attention.covered(q64, k64, v64, None, 0.0, None)


def test_a_bf16_policy_attends_through_the_kernel_while_it_trains():
    from advrag.engines.local.policy import TrainablePolicy

    policy = TrainablePolicy(tiny_llama(), keep_reference=False, cpu_bf16=True)
    assert policy.uses_bf16()
    with policy.training():
        assert policy.model.config._attn_implementation == attention.ATTENTION_NAME
    assert policy.model.config._attn_implementation == "sdpa"
    narrow = tiny_llama(head_size=32)
    with attention.amx_attention(narrow):  # heads of 32: not the kernel's, left as they are
        assert narrow.config._attn_implementation == "sdpa"


def packed_bounds(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])


def test_packed_sequences_compute_what_separate_calls_do_bit_for_bit(block_math):
    torch.manual_seed(3)
    lengths = [300, 64, 1, 130, 65]  # several blocks, one block, one token, partial last blocks
    bounds = packed_bounds(lengths)
    q, k, v = (torch.randn(2, 3, sum(lengths), 64, dtype=torch.bfloat16) for _ in range(3))
    grad_out = torch.randn_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, logsumexp = attention.causal_attention(*leaves, SCALE, bounds)
    out.backward(grad_out)
    for start, end in zip(bounds.tolist(), bounds.tolist()[1:]):
        pieces = [t[:, :, start:end].clone().requires_grad_() for t in (q, k, v)]
        alone, alone_logsumexp = attention.causal_attention(*pieces, SCALE)
        alone.backward(grad_out[:, :, start:end])
        assert torch.equal(out[:, :, start:end], alone)
        assert torch.equal(logsumexp[:, :, start:end], alone_logsumexp)
        for packed, piece in zip(leaves, pieces, strict=True):
            assert torch.equal(packed.grad[:, :, start:end], piece.grad)


@pytest.mark.parametrize("bounds, problem", [
    ([0, 10, 30], "from 0 to the length axis's size 40"),
    ([1, 40], "from 0 to the length axis's size 40"),
    ([0, 20, 20, 40], "must increase"),
    ([0], "bounds as an int64 tensor"),
])
def test_bounds_that_do_not_cut_the_length_axis_are_refused(bounds, problem):
    q = torch.randn(1, 2, 40, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=problem):
        attention.causal_attention(q, q, q, SCALE, torch.tensor(bounds))


def test_packed_sequences_the_kernel_does_not_cover_run_sdpa_each_on_its_own():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = tiny_llama().model.layers[0].self_attn
    torch.manual_seed(4)
    bounds = packed_bounds([30, 7, 50])
    q, k, v = (torch.randn(1, 2, 87, 64, dtype=torch.bfloat16) for _ in range(3))  # no gradient
    got, _ = attention.attention_forward(module, q, k, v, None, scaling=SCALE,
                                         cu_seq_lens_q=bounds)
    for start, end in zip(bounds.tolist(), bounds.tolist()[1:]):
        want, _ = sdpa_attention_forward(module, *(t[:, :, start:end] for t in (q, k, v)), None,
                                         scaling=SCALE)
        assert torch.equal(got[:, start:end], want)


def unequal_rows(*, left_padded: bool = False):
    """Three rows of 150, 90 and 40 tokens, padded to 150 (on the right unless ``left_padded``),
    every real token but the first scored."""
    from advrag.engines.local.tokenize import Batch

    torch.manual_seed(5)
    lengths = torch.tensor([150, 90, 40])
    real = torch.arange(150) < lengths[:, None]
    if left_padded:
        real = real.flip(1)
    ids = torch.randint(0, 97, (3, 150)).masked_fill(~real, 0)
    scored = real & (real.long().cumsum(1) > 1)
    return Batch(input_ids=ids, attention_mask=real, loss_mask=scored,
                 segment_ids=real.long() - 1, truncated_mask=torch.zeros(3, dtype=torch.bool))


def decoder_input_shapes(model, run) -> list[tuple[int, ...]]:
    shapes = []
    hook = model.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    try:
        run()
    finally:
        hook.remove()
    return shapes


@pytest.mark.parametrize("left_padded", [False, True])
def test_an_update_packs_right_padded_rows_and_scores_what_padded_rows_do(left_padded):
    model, batch = tiny_llama(), unequal_rows(left_padded=left_padded)

    def logprobs_and_gradients(context):
        model.zero_grad()
        with context, torch.autocast("cpu", dtype=torch.bfloat16):
            logprobs, _ = token_logprobs(model, batch)
            logprobs.sum().backward()
        return logprobs.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}

    padded, padded_grads = logprobs_and_gradients(nullcontext())
    runs = []
    shapes = decoder_input_shapes(model, lambda: runs.append(
        logprobs_and_gradients(attention.amx_attention(model))))
    (logprobs, grads), = runs
    # right padding: one row of the 280 real tokens; left padding: the batch as it is, masked
    assert shapes == ([(3, 150)] if left_padded else [(1, 280)])
    assert torch.equal(logprobs != 0, batch.loss_mask)
    assert (logprobs - padded).abs().max() < 0.05  # bf16 roundings, same function
    assert max(relative_differences(grads, padded_grads)) < 0.02
