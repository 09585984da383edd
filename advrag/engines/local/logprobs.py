"""Per-token log-probabilities (and entropies) of a token batch under a causal LM.

Alignment: position ``t`` holds ``log p(token_t | tokens_<t)``; position 0 has
no prediction and holds 0, as does every padding position. This matches
``Batch.loss_mask``, which is never set on position 0, so log-probs and masks
index the same tokens.

Two variants: ``token_logprobs`` is one differentiable forward (the loss uses
it on a micro-batch); ``sequence_logprobs`` runs it without gradients over
micro-batches and stitches the results (old and reference log-probs). Both
expect the batch on the model's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from advrag.core.losses import entropy_from_logits, logprobs_from_logits
from advrag.engines.local.tokenize import Batch


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


def _shift_right(values: Tensor, attention_mask: Tensor) -> Tensor:
    """Predictions for tokens 1..n ``(b, n-1)`` → ``(b, n)`` with 0 at position 0 and on padding."""
    return torch.where(attention_mask, F.pad(values, (1, 0)), 0.0)


def token_logprobs(
    model: nn.Module, batch: Batch, *, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """One forward pass: log-probs ``(batch, seq)`` with gradients; entropy ``(batch, seq)``/None.

    The entropy (of the distribution that predicted each token) is a
    diagnostic, computed from detached logits so it never enters a gradient.
    """
    attention_mask = batch.attention_mask.bool()
    logits = model(
        input_ids=batch.input_ids, attention_mask=attention_mask.long(), use_cache=False
    ).logits[:, :-1]
    logprobs = _shift_right(logprobs_from_logits(logits, batch.input_ids[:, 1:]), attention_mask)
    if not with_entropy:
        return logprobs, None
    entropy = _shift_right(entropy_from_logits(logits.detach()), attention_mask)
    return logprobs, entropy


@torch.no_grad()
def sequence_logprobs(
    model: nn.Module, batch: Batch, *, micro_batch_size: int, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``(batch, seq)`` without gradients, ``micro_batch_size`` rows at a time.

    Micro-batches group rows of similar length (``micro_batches``); results go
    back to their rows, zero on padding. Returns the entropy ``(batch, seq)``
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
