"""Per-token log-probabilities (and entropies) of a token batch's scored tokens under a causal LM.

Alignment: position ``t`` holds ``log p(token_t | tokens_<t)`` where
``Batch.loss_mask`` scores token ``t`` (the policy's tokens: all that the loss,
the KL, SFT and ARR's entropies read), and 0 everywhere else. Only the
positions that predict a scored token go through the LM head: its
vocabulary-wide matmul, log-softmax and entropy over every prompt and retrieved
token were a third of a SmolLM2 update (``bench/updates/bench_update.py``).

On a CPU, micro-batches of at most ``MATH_ATTENTION_MAX_WIDTH`` tokens run
SDPA's math kernel instead of its flash kernel, whose fixed cost per call
(mostly in the backward) is not repaid on short rows
(``bench/updates/bench_attention.py``); the same function, computed another way. Not
under activation checkpointing: its recompute in the backward runs outside that
choice, and must compute exactly what the forward did. Compiled layers
(``compile_update``) make the same choice inside each layer
(``KernelChoosingLayer``): dynamo does not guard on a kernel chosen outside the
compiled code, so one dynamic-shape graph kept whichever kernel its first
micro-batch traced — the math kernel on every long micro-batch after a short
first one, even from the inductor cache in later runs (a compiled update about
2.7× slower, measured) — while a choice made inside is traced and guarded on:
one graph for short micro-batches, one for the rest.

Batches are right-padded, so the causal mask alone keeps every real token from
seeing padding: the decoder gets no attention mask then, and attention runs its
causal kernel (which skips the blocks above the diagonal and shares grouped
key/value heads) instead of a dense mask over every block — the same values
at the real tokens, a tenth off a SmolLM2 update on a CPU.

Packed rows: where attention takes packed sequences (the bf16 kernels'
attention function, ``attention.ATTENTION_NAME``, in a forward with
gradients), a micro-batch's rows go through the decoder one after another as a
single row without their padding, positions restarting at each
(``packed_inputs``): the same function at the real tokens, and none of the
work a micro-batch of unequal rows spent on padding (18 % of the positions
of ``bench/updates/bench_update.py``'s rows).

Two variants: ``token_logprobs`` is one differentiable forward (the loss uses
it on a micro-batch); ``sequence_logprobs`` runs it without gradients over
micro-batches and stitches the results (old and reference log-probs). Both
expect the batch on the model's device.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from advrag.core.losses import entropy_from_logits, logprobs_from_logits
from advrag.engines.local.attention import ATTENTION_NAME
from advrag.engines.local.tokenize import Batch

MATH_ATTENTION_MAX_WIDTH = 128
"""Widest CPU micro-batch (tokens) whose attention runs SDPA's math kernel."""


def micro_batches(attention_mask: Tensor, micro_batch_size: int) -> list[Tensor]:
    """Row indices of each micro-batch: rows sorted by length (longest first), in groups.

    Each forward pass then pads only to the longest of rows of similar length,
    instead of to the longest row of an arbitrary group (``Batch.select`` drops
    the columns that are padding in all its rows). Ties keep the batch order.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    lengths = attention_mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    return list(order.split(micro_batch_size))


def token_logprobs(
    model: nn.Module, batch: Batch, *, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """One forward pass: log-probs ``(batch, seq)`` with gradients; entropy ``(batch, seq)``/None.

    Both hold values at the scored tokens (``batch.loss_mask``) and 0 elsewhere.
    The entropy (of the distribution that predicted each token) is a
    diagnostic, computed from detached logits so it never enters a gradient.
    """
    rows, cols = batch.loss_mask.nonzero(as_tuple=True)
    logits = scored_logits(model, batch, rows, cols)
    logprobs = _place(logprobs_from_logits(logits, batch.input_ids[rows, cols]), batch, rows, cols)
    if not with_entropy:
        return logprobs, None
    return logprobs, _place(entropy_from_logits(logits.detach()), batch, rows, cols)


def scored_logits(model: nn.Module, batch: Batch, rows: Tensor, cols: Tensor) -> Tensor:
    """Logits ``(n, vocab)`` of the positions ``cols - 1`` that predict tokens ``(rows, cols)``.

    The decoder runs over the whole batch; the LM head only over those
    positions. Models whose head does more than a linear map (logit
    soft-capping or scaling) take the full forward and pick the positions.
    """
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    right_padded = padded_only_on_the_right(batch.attention_mask)
    if right_padded and batch.attention_mask.any() and _attention_takes_packed_rows(causal):
        inputs, at = packed_inputs(batch, rows, cols - 1)
    else:
        inputs, at = {"input_ids": batch.input_ids}, (rows, cols - 1)
        if not right_padded:
            inputs["attention_mask"] = batch.attention_mask.long()
    inputs["use_cache"] = False
    layers_choose = _recomputes_activations(causal) or _layers_choose_kernel(causal)
    with attention_kernel(inputs["input_ids"], fixed_kernel=layers_choose):
        if not _linear_head(causal.config):
            return model(**inputs).logits[at]
        hidden = causal.get_decoder()(**inputs).last_hidden_state
    return causal.get_output_embeddings()(hidden[at])


def packed_inputs(batch: Batch, rows: Tensor, cols: Tensor) -> tuple[dict, tuple[Tensor, Tensor]]:
    """The decoder's inputs for ``batch``'s right-padded rows packed into one row without padding,
    and where positions ``(rows, cols)`` of the batch lie in it.

    Each row's tokens follow the previous row's, its position ids restart at 0
    (rotary embeddings as in its own row), and ``cu_seq_lens_q`` bounds the rows
    for attention. The all-ones mask stops transformers from building a dense
    block mask out of the restarting positions.
    """
    real = batch.attention_mask.bool()
    lengths = real.sum(dim=1)
    starts = lengths.cumsum(0) - lengths
    bounds = torch.cat([starts[lengths > 0], lengths.sum().reshape(1)])  # empty rows: no sequence
    positions = real.long().cumsum(dim=1) - 1
    inputs = {"input_ids": batch.input_ids[real][None], "position_ids": positions[real][None],
              "attention_mask": torch.ones_like(positions[real])[None],
              "cu_seq_lens_q": bounds}
    return inputs, (torch.zeros_like(rows), starts[rows] + cols)


def _attention_takes_packed_rows(model: nn.Module) -> bool:
    """Whether ``model``'s attention takes packed rows (``attention.ATTENTION_NAME``, see
    ``packed_inputs``) and runs its kernels for this forward (gradients on)."""
    return (torch.is_grad_enabled()
            and getattr(model.config, "_attn_implementation", None) == ATTENTION_NAME)


def padded_only_on_the_right(attention_mask: Tensor) -> bool:
    """Whether each row's real tokens come first, so a causal mask hides all its padding."""
    lengths = attention_mask.sum(dim=1, keepdim=True)
    columns = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return torch.equal(attention_mask.bool(), columns < lengths)


def attention_kernel(tokens: Tensor, *, fixed_kernel: bool) -> AbstractContextManager:
    """SDPA's math kernel for a short micro-batch on a CPU (``tokens``: ``(batch, width, ...)``),
    unless the caller must not choose (``fixed_kernel``: recomputed layers, or compiled
    layers that choose themselves); the default otherwise."""
    short = tokens.device.type == "cpu" and tokens.shape[1] <= MATH_ATTENTION_MAX_WIDTH
    return sdpa_kernel([SDPBackend.MATH]) if short and not fixed_kernel else nullcontext()


class KernelChoosingLayer(nn.Module):
    """A decoder layer that picks SDPA's kernel for its own input (``attention_kernel``), so
    that ``torch.compile`` traces the choice and guards on the width it depends on."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: Tensor, *args, **kwargs):
        recomputed = getattr(self.layer, "gradient_checkpointing", False)
        with attention_kernel(hidden_states, fixed_kernel=recomputed):
            return self.layer(hidden_states, *args, **kwargs)


def _recomputes_activations(model: nn.Module) -> bool:
    """Whether ``model`` recomputes its layers in the backward (activation checkpointing);
    transformers 5.2x calls it ``is_activation_checkpointing``, older releases
    ``is_gradient_checkpointing``."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(getattr(model, "is_gradient_checkpointing", False) if flag is None else flag)


def _layers_choose_kernel(model: nn.Module) -> bool:
    """Whether ``model``'s layers pick their attention kernel themselves (``KernelChoosingLayer``,
    swapped in by a compiled update)."""
    return any(isinstance(module, KernelChoosingLayer) for module in model.modules())


def _linear_head(config) -> bool:
    """Whether a model's logits are just its output embedding applied to the last hidden state."""
    return (not getattr(config, "final_logit_softcapping", None)
            and getattr(config, "logit_scale", None) in (None, 1.0))


def _place(values: Tensor, batch: Batch, rows: Tensor, cols: Tensor) -> Tensor:
    """Values of the scored tokens ``(n,)`` → ``(batch, seq)``, 0 elsewhere (differentiable)."""
    zeros = torch.zeros(batch.input_ids.shape, dtype=values.dtype, device=values.device)
    return zeros.index_put((rows, cols), values)


@torch.no_grad()
def sequence_logprobs(
    model: nn.Module, batch: Batch, *, micro_batch_size: int, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``(batch, seq)`` without gradients, ``micro_batch_size`` rows at a time.

    Micro-batches group rows of similar length (``micro_batches``); results go
    back to their rows, zero outside the scored tokens. Returns the entropy ``(batch, seq)``
    too when ``with_entropy``, else None.
    """
    logprobs = torch.zeros(batch.input_ids.shape, device=batch.input_ids.device)
    entropy = torch.zeros_like(logprobs) if with_entropy else None
    for index in micro_batches(batch.attention_mask, micro_batch_size):
        lp, ent = token_logprobs(model, batch.select(index), with_entropy=with_entropy)
        logprobs[index, : lp.shape[1]] = lp.float()
        if entropy is not None:
            entropy[index, : ent.shape[1]] = ent.float()
    return logprobs, entropy
