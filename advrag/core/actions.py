"""Token ↔ action bookkeeping: which action each token belongs to, per-action means.

An "action" is a tagged span of an agent's message (ARR's verify, response,
think, …) that was cut into its own trajectory segment, so a token's segment
index says which action it belongs to. Used for ARR's critique-token process
advantage (eq. 9) and the per-action mean entropies of eqs. 7–8.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def action_token_ids(segment_ids: Tensor, segment_action: Sequence[Sequence[int]]) -> Tensor:
    """Action index of every token, −1 outside actions and on padding.

    Args:
        segment_ids: segment index of each token, −1 on padding, long ``(batch, seq)``.
        segment_action: per row, the action index of each segment (−1 for none).

    Returns:
        Long ``(batch, seq)``.
    """
    if len(segment_action) != segment_ids.shape[0]:
        raise ValueError(f"{len(segment_action)} segment tables for {segment_ids.shape[0]} rows")
    out = torch.full_like(segment_ids, -1)
    for row, table in enumerate(segment_action):
        # a trailing −1 entry: padding's segment id −1 indexes it
        lookup = torch.tensor([*table, -1], dtype=torch.long, device=segment_ids.device)
        out[row] = lookup[segment_ids[row]]
    return out


def action_means(values: Tensor, action_ids: Tensor, n_actions: int) -> Tensor:
    """Mean of ``values`` over each action's tokens.

    Args:
        values: per-token values (e.g. entropies), float ``(batch, seq)``.
        action_ids: from ``action_token_ids``, long ``(batch, seq)``.
        n_actions: columns of the result (at least the largest action index + 1).

    Returns:
        ``(batch, n_actions)``; 0 for an action with no tokens (e.g. truncated
        away). Values outside actions are ignored, even NaN.
    """
    index = action_ids + 1  # column 0 collects the tokens outside actions
    shape = (values.shape[0], n_actions + 1)
    sums = values.new_zeros(shape).scatter_add(1, index, values)
    counts = values.new_zeros(shape).scatter_add(1, index, torch.ones_like(values))
    return (sums / counts.clamp(min=1))[:, 1:]
