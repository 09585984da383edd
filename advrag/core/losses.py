"""Policy-gradient loss, KL penalties, loss aggregation, and per-token log-probs/entropy.

Conventions follow verl's ``core_algos`` (pinned in ``tests/unit/test_losses.py``):

- Per-token tensors are ``(batch, seq)``; masks are bool or 0/1 of the same
  shape. Masked positions are selected out with ``torch.where``, so finite
  values there reach neither the loss nor its gradient.
- The log-ratio ``logprobs − old_logprobs`` is clamped to [−20, 20] before
  ``exp`` so one stale token cannot overflow the ratio.
- Dual clip (Ye et al. 2020): for A < 0 the clipped PPO loss is capped at
  ``−A·c``; it must have ``c > 1``.
- k3 (Schulman's estimator) is clamped to [0, 10]. verl clamps to [−10, 10];
  k3 is non-negative in exact arithmetic, so the lower bound of 0 only removes
  rounding error.
- Aggregating over a mask with no tokens gives 0, not NaN. Both ``seq-mean``
  modes average over the sequences with at least one unmasked token, so rows
  that are all padding do not dilute the loss.
- ``seq-mean-token-sum-norm`` (Dr.GRPO) divides each sequence's token sum by a
  constant ``horizon``. It defaults to ``mask.shape[-1]``, which changes with
  padding; pass the maximum response length to make the loss padding-free.
- ``logprobs_from_logits`` and ``entropy_from_logits`` compute in at least
  float32 (half-precision logits are upcast), as verl does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

_LOG_RATIO_BOUND = 20.0
_K3_MAX = 10.0


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is True; 0 when nothing is masked in."""
    return torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1)


def _token_mean(per_token: Tensor, mask: Tensor, horizon: int) -> Tensor:
    """Sum over all unmasked tokens / their count (``horizon`` unused)."""
    return _masked_mean(per_token, mask)


def _seq_mean_token_mean(per_token: Tensor, mask: Tensor, horizon: int) -> Tensor:
    """Mean over each sequence's tokens, then over sequences (``horizon`` unused)."""
    counts = mask.sum(dim=-1)
    seq_means = torch.where(mask, per_token, 0.0).sum(dim=-1) / counts.clamp(min=1)
    return _masked_mean(seq_means, counts > 0)


def _seq_mean_token_sum_norm(per_token: Tensor, mask: Tensor, horizon: int) -> Tensor:
    """Each sequence's token sum / ``horizon``, then the mean over sequences."""
    seq_sums = torch.where(mask, per_token, 0.0).sum(dim=-1) / horizon
    return _masked_mean(seq_sums, mask.sum(dim=-1) > 0)


_AGGREGATIONS: dict[str, Callable[[Tensor, Tensor, int], Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def aggregate_loss(
    per_token: Tensor, mask: Tensor, mode: str = "token-mean", *, horizon: int | None = None
) -> Tensor:
    """Reduce a per-token loss ``(batch, seq)`` to a scalar over the tokens where ``mask`` is 1.

    Modes: ``token-mean`` (every unmasked token weighs the same),
    ``seq-mean-token-mean`` (every sequence with a token weighs the same),
    ``seq-mean-token-sum-norm`` (Dr.GRPO: token sum / ``horizon``, mean over
    sequences with a token; ``horizon`` defaults to ``mask.shape[-1]``).
    """
    if mode not in _AGGREGATIONS:
        raise ValueError(
            f"unknown loss aggregation {mode!r}; expected one of {list(_AGGREGATIONS)}"
        )
    if per_token.shape != mask.shape:
        raise ValueError(f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)} differ")
    horizon = mask.shape[-1] if horizon is None else horizon
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    return _AGGREGATIONS[mode](per_token, mask.bool(), horizon)


def _ppo_per_token(
    ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Clipped PPO loss per token, and where the clip and the dual clip bound it."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    clip_mask = clipped > unclipped
    dual_mask = torch.zeros_like(clip_mask)
    if dual_clip is not None:
        cap = -advantages * dual_clip
        dual_mask = (advantages < 0) & (per_token > cap)
        per_token = torch.where(dual_mask, cap, per_token)
    return per_token, clip_mask, dual_mask


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    agg: str = "token-mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clip range and optional dual clip.

    Per token, with ``r = exp(logprobs − old_logprobs)``:
    ``max(−A·r, −A·clip(r, 1 − clip_low, 1 + clip_high))``, capped at ``−A·dual_clip``
    where A < 0; then reduced by :func:`aggregate_loss` with ``agg`` and ``horizon``. An
    off-policy correction (REX-RAG's) comes in through ``old_logprobs``: the behaviour
    log-prob the ratio divides by.

    Args:
        logprobs, old_logprobs, advantages: shape ``(batch, seq)``.
        response_mask: tokens the policy sampled (bool or 0/1), ``(batch, seq)``.

    Returns:
        The scalar loss and metrics over unmasked tokens: ``clip_fraction``
        (share where the clip or the dual clip bound the loss),
        ``dual_clip_fraction``, ``approx_kl`` (mean of old − new log-prob) and
        ``ratio_mean``.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    mask = response_mask.bool()
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    per_token, clip_mask, dual_mask = _ppo_per_token(
        ratio, advantages, clip_low, clip_high, dual_clip
    )
    loss = aggregate_loss(per_token, mask, agg, horizon=horizon)
    with torch.no_grad():
        metrics = {
            "clip_fraction": _masked_mean((clip_mask | dual_mask).float(), mask).item(),
            "dual_clip_fraction": _masked_mean(dual_mask.float(), mask).item(),
            "approx_kl": _masked_mean(old_logprobs - logprobs, mask).item(),
            "ratio_mean": _masked_mean(ratio, mask).item(),
        }
    return loss, metrics


def _kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """log p − log q: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


def _kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """½(log p − log q)²: low variance, biased, non-negative."""
    return 0.5 * (logprobs - ref_logprobs).square()


def _kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """exp(log q − log p) − (log q − log p) − 1: unbiased, non-negative, clamped to [0, 10]."""
    log_ratio = (ref_logprobs - logprobs).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    return (torch.expm1(log_ratio) - log_ratio).clamp(0.0, _K3_MAX)


_KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": _kl_k1,
    "k2": _kl_k2,
    "k3": _kl_k3,
}


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from tokens sampled by π, shape ``(batch, seq)``.

    ``kind`` is ``"k1"``, ``"k2"`` or ``"k3"`` (Schulman, "Approximating KL
    divergence"); mask and reduce the result with :func:`aggregate_loss`.
    """
    if kind not in _KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {list(_KL_ESTIMATORS)}")
    return _KL_ESTIMATORS[kind](logprobs, ref_logprobs)


def _at_least_fp32(logits: Tensor) -> Tensor:
    """Upcast half-precision logits to float32; leave float32/float64 alone."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dimension: ``(batch, seq, vocab)`` → ``(batch, seq)``.

    ``H = logsumexp(z) − Σ softmax(z)·z``, stable for large finite logits.
    """
    logits = _at_least_fp32(logits)
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def logprobs_from_logits(logits: Tensor, token_ids: Tensor) -> Tensor:
    """Log-probability of each token: logits ``(batch, seq, vocab)``, ids ``(batch, seq)``.

    The logits at position t must be the ones that predict ``token_ids[:, t]``
    (shift them before calling). Returns ``(batch, seq)``.
    """
    if token_ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"token_ids {tuple(token_ids.shape)} do not match logits {tuple(logits.shape)}"
        )
    log_probs = torch.log_softmax(_at_least_fp32(logits), dim=-1)
    return log_probs.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "ppo_clip": policy_loss,
}
"""Policy-gradient losses by name (what ``TrainConfig.policy_loss`` selects); each takes
``policy_loss``'s arguments and returns the aggregated loss and its token metrics."""
