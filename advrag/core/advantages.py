"""Outcome advantages: GRPO (and Dr.GRPO) and the REINFORCE++ group baseline.

Every rollout of one prompt shares a group id; its scalar score is compared
with the other rollouts of the same group.

Conventions (pinned in ``tests/unit/test_advantages.py``):

- GRPO is verl's: ``(s − mean_g) / (std_g + ε)`` with the unbiased
  (Bessel-corrected) group std and ε = 1e-6. ``scale="none"`` is Dr.GRPO: the
  group mean is subtracted and nothing is divided.
- A group of size one gets GRPO advantage 0. verl instead uses mean 0 and
  std 1 there, which passes the raw score through; a lone rollout has nothing
  to be compared with, so it carries no relative signal, and a raw score would
  also sit on a different scale from the z-scores beside it.
- REINFORCE++-baseline (UR² §3.2) subtracts the group mean, then whitens over
  every unmasked token of the batch (token-weighted mean, unbiased std, ε
  added to the std). A group of size one keeps baseline 0 (its raw score), as
  verl does: the batch whitening that follows still puts it on the common
  scale, unlike GRPO where no later step would.
- Scores are compared in the dtype given; integer scores are cast to the
  default float dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

GroupIds = Sequence[int | str] | Tensor

SCALES = ("group", "none")


def _float_scores(scores: Tensor) -> Tensor:
    """Scores as a floating 1-D tensor."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (batch,), got shape {tuple(scores.shape)}")
    return scores if scores.is_floating_point() else scores.to(torch.get_default_dtype())


def _group_index(group_ids: GroupIds, batch: int, device: torch.device) -> tuple[Tensor, int]:
    """Dense group index (batch,) in order of first appearance, and the number of groups."""
    ids = _id_list(group_ids)
    if len(ids) != batch:
        raise ValueError(f"got {len(ids)} group ids for {batch} scores")
    first_seen: dict[int | str, int] = {}
    index = [first_seen.setdefault(g, len(first_seen)) for g in ids]
    return torch.tensor(index, dtype=torch.long, device=device), len(first_seen)


def informative_group_fraction(scores: Tensor, group_ids: GroupIds) -> float:
    """Share of groups whose rewards are not all equal: the groups GRPO can learn from.

    A group whose rollouts all score the same gets zero group-relative advantage
    (the cold start's failure: every rollout −0.2). 0.0 for an empty batch.
    """
    groups: dict = {}
    for score, group in zip(_float_scores(scores).tolist(), _id_list(group_ids), strict=True):
        groups.setdefault(group, set()).add(score)
    return sum(len(seen) > 1 for seen in groups.values()) / len(groups) if groups else 0.0


def _id_list(group_ids: GroupIds) -> list:
    """Group ids as hashable python values."""
    return group_ids.tolist() if isinstance(group_ids, Tensor) else list(group_ids)


def _group_moments(scores: Tensor, group_ids: GroupIds) -> tuple[Tensor, Tensor, Tensor]:
    """Each sample's group mean, unbiased group std and group size, all (batch,).

    The std of a group of one is 0 (the n − 1 divisor is clamped to 1).
    """
    index, n_groups = _group_index(group_ids, scores.shape[0], scores.device)
    zeros = scores.new_zeros(n_groups)
    count = zeros.index_add(0, index, torch.ones_like(scores))
    mean = zeros.index_add(0, index, scores) / count
    squares = zeros.index_add(0, index, (scores - mean[index]).square())
    std = (squares / (count - 1).clamp(min=1)).sqrt()
    return mean[index], std[index], count[index]


def grpo_advantages(
    scores: Tensor, group_ids: GroupIds, *, eps: float = 1e-6, scale: str = "group"
) -> Tensor:
    """Per-group z-scored outcome advantages (GRPO), or mean-centred ones (Dr.GRPO).

    Args:
        scores: one scalar reward per rollout, shape ``(batch,)``.
        group_ids: ``batch`` ints or strings; rollouts of one prompt share an id.
        eps: added to the unbiased group std before dividing.
        scale: ``"group"`` divides by ``std_g + eps`` (GRPO); ``"none"`` only
            subtracts the group mean (Dr.GRPO).

    Returns:
        Advantages, shape ``(batch,)``. A group of size one gets 0 (a lone
        rollout carries no relative signal); equal scores in a group give 0, up to
        rounding of the group mean.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {list(SCALES)}")
    scores = _float_scores(scores)
    mean, std, _ = _group_moments(scores, group_ids)
    centred = scores - mean  # exactly 0 for a group of one: its mean is its own score
    return centred / (std + eps) if scale == "group" else centred


def token_advantages(seq_advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Broadcast one advantage per sequence to its tokens, 0 where the mask is 0.

    Args:
        seq_advantages: shape ``(batch,)``.
        response_mask: tokens the policy sampled (bool or 0/1), shape ``(batch, seq)``.

    Returns:
        Shape ``(batch, seq)``.
    """
    if response_mask.dim() != 2 or response_mask.shape[0] != seq_advantages.shape[0]:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} does not match "
            f"{seq_advantages.shape[0]} sequences"
        )
    return torch.where(response_mask.bool(), seq_advantages[:, None], 0.0)


def _masked_whiten(values: Tensor, mask: Tensor, eps: float) -> Tensor:
    """(v − mean) / (std + eps) over the positions where ``mask`` is True; 0 elsewhere.

    Mean and unbiased std are taken over the masked positions (token-weighted).
    """
    count = mask.sum()
    mean = torch.where(mask, values, 0.0).sum() / count.clamp(min=1)
    squares = torch.where(mask, (values - mean).square(), 0.0).sum()
    std = (squares / (count - 1).clamp(min=1)).sqrt()
    return torch.where(mask, (values - mean) / (std + eps), 0.0)


def reinforce_pp_baseline_advantages(
    scores: Tensor, group_ids: GroupIds, response_mask: Tensor, *, eps: float = 1e-6
) -> Tensor:
    """REINFORCE++ with a group-mean baseline, whitened over the batch's response tokens.

    Args:
        scores: one scalar reward per rollout, shape ``(batch,)``.
        group_ids: ``batch`` ints or strings; rollouts of one prompt share an id.
        response_mask: tokens the policy sampled (bool or 0/1), shape ``(batch, seq)``.
        eps: added to the batch token std before dividing.

    Returns:
        Token advantages, shape ``(batch, seq)``: over the unmasked tokens they
        have mean 0 and unbiased std 1 (up to ``eps``); masked tokens are 0. A
        group of size one has baseline 0, so its raw score enters the whitening.
    """
    scores = _float_scores(scores)
    mean, _, count = _group_moments(scores, group_ids)
    centred = torch.where(count > 1, scores - mean, scores)
    mask = response_mask.bool()
    return _masked_whiten(token_advantages(centred, mask), mask, eps)


def _registrar(table: dict[str, Callable], kind: str) -> Callable:
    """A ``register(name)`` decorator adding functions to ``table`` (each name once)."""

    def register_as(name: str) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            if name in table:
                raise ValueError(f"{kind} {name!r} is already registered")
            table[name] = fn
            return fn

        return register

    return register_as


AdvantageEstimator = Callable[[Tensor, GroupIds, Tensor], Tensor]
"""``(scores (batch,), group_ids, response_mask (batch, seq)) → token advantages (batch, seq)``."""

ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""Outcome advantage estimators by name (what ``TrainConfig.advantage`` selects)."""

register_advantage = _registrar(ADVANTAGE_ESTIMATORS, "advantage estimator")

ADVANTAGE_TERMS: dict[str, Callable] = {}
"""Terms a recipe adds to the outcome token advantages, by name (e.g. ARR's ``arr_process``
in ``core.arr_process``); each is a pure function of the rollout's tensors."""

register_advantage_term = _registrar(ADVANTAGE_TERMS, "advantage term")


@register_advantage("grpo")
def grpo_token_advantages(scores: Tensor, group_ids: GroupIds, response_mask: Tensor) -> Tensor:
    """GRPO's group z-score on every response token."""
    return token_advantages(grpo_advantages(scores, group_ids), response_mask)


@register_advantage("drgrpo")
def drgrpo_token_advantages(scores: Tensor, group_ids: GroupIds, response_mask: Tensor) -> Tensor:
    """Dr.GRPO's group mean-centring (no std division) on every response token."""
    return token_advantages(grpo_advantages(scores, group_ids, scale="none"), response_mask)


register_advantage("reinforce_pp")(reinforce_pp_baseline_advantages)
