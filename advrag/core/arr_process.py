"""ARR's process-aware advantage on the verifier's critique tokens (eqs. 6, 7, 9), as tensors.

Registered as the advantage term ``"arr_process"`` (``core.advantages.ADVANTAGE_TERMS``):
a recipe computes the outcome token advantages, reads the sampling policy's
per-token entropy from the same pass, and adds this term before the loss.

Per critique action ``a`` of row ``b`` (eq. 7, then eq. 6):
``clarity = exp(−H̄_a)·1[gold ∈ docs_a]·(2·1[gold ∈ a] − 1)`` and
``A_proc = F1(y_reasoner)_b · clarity · impact_b``, added to that action's
tokens only (eq. 9's indicator). An action with no kept tokens (cut by
``max_seq_len``) has no entropy: its mean entropy and clarity are NaN, its
``A_proc`` 0 (it has no token to receive it anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from advrag.core.actions import action_means
from advrag.core.advantages import register_advantage_term


@dataclass(frozen=True)
class ProcessAdvantage:
    """The term's result: token advantages ``(batch, seq)`` and its per-action parts ``(batch, A)``."""

    advantages: Tensor
    mean_entropy: Tensor
    clarity: Tensor
    process: Tensor


@register_advantage_term("arr_process")
def arr_process_advantages(
    advantages: Tensor,
    entropy: Tensor,
    action_ids: Tensor,
    loss_mask: Tensor,
    gold_in_docs: Tensor,
    gold_in_action: Tensor,
    f1_reasoner: Tensor,
    impacts: Tensor,
) -> ProcessAdvantage:
    """Outcome token advantages plus each critique token's own action's ``A_proc``.

    Args:
        advantages: outcome (GRPO) token advantages, float ``(batch, seq)``.
        entropy: the sampling policy's token entropy, float ``(batch, seq)``.
        action_ids: critique action of each token, −1 elsewhere, long ``(batch, seq)``.
        loss_mask: tokens the verifier sampled, ``(batch, seq)``.
        gold_in_docs: whether the action's step documents hold a gold answer, bool ``(batch, A)``.
        gold_in_action: whether the action's content holds a gold answer, bool ``(batch, A)``.
        f1_reasoner: F1 of the reasoner's answer per row, ``(batch,)``.
        impacts: eq. 8's impact per row, ``(batch,)``.
    """
    n_actions = gold_in_docs.shape[1]
    mean_entropy = action_means(entropy.float(), action_ids.long(), n_actions)
    kept = ~mean_entropy.isnan()
    sign = torch.where(gold_in_action.bool(), 1.0, -1.0)
    clarity = torch.exp(-mean_entropy) * gold_in_docs.float() * sign
    process = torch.where(kept, f1_reasoner.float()[:, None] * clarity * impacts.float()[:, None],
                          0.0)
    on_action = (action_ids >= 0) & loss_mask.bool()
    gathered = torch.gather(process, 1, action_ids.long().clamp(min=0)) if n_actions else \
        torch.zeros_like(advantages)
    tokens = torch.where(on_action, gathered.to(advantages.dtype), 0.0)
    return ProcessAdvantage(advantages + tokens, mean_entropy, clarity, process)
