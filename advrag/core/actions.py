"""Token ↔ action bookkeeping: which action each token belongs to, per-action means.

An "action" is the content of a tagged span of an agent's message (ARR's
verify, response, think, …: the text between the tags, not the markup) that
was cut into its own trajectory segment, so a token's segment index says which
action it belongs to. Used for ARR's critique-token process advantage (eq. 9)
and the per-action mean entropies of eqs. 7–8.

An action whose tokens were all cut away (``max_seq_len`` keeps a
trajectory's head) has no mean: ``action_means`` gives NaN there, the callers
leave it out of entropy trends and clarity, and ``excluded_actions`` counts it.
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


def action_token_counts(action_ids: Tensor, n_actions: int) -> Tensor:
    """Number of kept tokens of each action, long ``(batch, n_actions)``.

    Args:
        action_ids: from ``action_token_ids``, long ``(batch, seq)``.
        n_actions: columns of the result (at least the largest action index + 1).
    """
    index = action_ids + 1  # column 0 collects the tokens outside actions
    counts = action_ids.new_zeros((action_ids.shape[0], n_actions + 1))
    return counts.scatter_add(1, index, torch.ones_like(action_ids))[:, 1:]


def action_means(values: Tensor, action_ids: Tensor, n_actions: int) -> Tensor:
    """Mean of ``values`` over each action's tokens; NaN for an action with no kept token.

    Args:
        values: per-token values (e.g. entropies), float ``(batch, seq)``.
        action_ids: from ``action_token_ids``, long ``(batch, seq)``.
        n_actions: columns of the result (at least the largest action index + 1).

    Returns:
        ``(batch, n_actions)``. Values outside actions are ignored, even NaN.
    """
    index = action_ids + 1  # column 0 collects the tokens outside actions
    sums = values.new_zeros((values.shape[0], n_actions + 1)).scatter_add(1, index, values)[:, 1:]
    counts = action_token_counts(action_ids, n_actions).to(values.dtype)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.nan)


def excluded_actions(action_ids: Tensor, n_actions: Sequence[int]) -> Tensor:
    """Per row, how many of its ``n_actions[row]`` actions have no kept token, long ``(batch,)``.

    These are the actions left out of the entropy means, trends and clarity.
    """
    if len(n_actions) != action_ids.shape[0]:
        raise ValueError(f"{len(n_actions)} action counts for {action_ids.shape[0]} rows")
    counts = action_token_counts(action_ids, max([*n_actions, 0]))
    real = torch.arange(counts.shape[1], device=counts.device) < torch.tensor(
        list(n_actions), dtype=torch.long, device=counts.device)[:, None]
    return ((counts == 0) & real).sum(dim=1)
