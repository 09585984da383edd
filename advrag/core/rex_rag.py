"""REX-RAG's policy correction (REX-RAG §3, eq. 6), in the form its released code trains with.

A batch mixes policy trajectories with *probes*: a failed trajectory's prefix, an inserted
exploration prompt from a pool, and the policy's continuation. The clipped PPO ratio of every
response token is taken against a mixture behaviour policy instead of ``π_old``::

    log μ_mix = log((1 − a)·π_old + a·μ)            (``behaviour_log_prob``)

with ``a`` the kept probes' share of the batch and ``μ`` the probe policy's probability of the
token: 0 on a policy trajectory (the mixture is then ``(1 − a)·π_old``); on a probe,
``π_old · z^(−1/j)`` on its ``j`` prefix tokens (``probe_prefix_prob``; ``z`` = 1 − the batch's
accuracy of policy trajectories, how likely a trajectory was to fail and be probed at all,
spread over the prefix), the pool's own next-token distribution on the inserted prompt tokens
(``pool_next_token_probs``) and ``π_old`` after the prompt.

Before the update, the trajectory filter keeps only the probes the current policy finds most
natural: ranked by the mean old log-prob of their inserted prompt tokens (``probe_ranking``),
the top ``probes_to_keep`` stay; the keep ratio follows the probes' accuracy by an exponential
average (``updated_keep_ratio``).

How this departs from the paper: eq. 6 writes the balance-heuristic weight
``(1 + α)·π_θ / (π_θ + α·π_ε)`` per token; the release (and this module) puts the same mixture
in the denominator of the PPO ratio ``π_θ / μ_mix``, with ``a = α / (1 + α)``, so the clipping
applies to the corrected ratio. Probabilities here are plain probabilities (not log-probs)
where the probe policy can be 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor


def behaviour_log_prob(old_log_prob: Tensor, probe_prob: Tensor, probe_share: float) -> Tensor:
    """``log((1 − probe_share)·exp(old_log_prob) + probe_share·probe_prob)``, elementwise.

    ``old_log_prob``: ``log π_old`` of each token, any shape; ``probe_prob``: ``μ`` of each token
    (same shape, in [0, ∞): 0 on policy trajectories); ``probe_share``: ``a`` in [0, 1]. Computed
    in log space (``logaddexp``), so ``a = 0`` gives ``old_log_prob`` exactly and ``μ = 0`` gives
    ``log(1 − a) + old_log_prob`` without underflow.
    """
    if not 0.0 <= probe_share <= 1.0:
        raise ValueError(f"probe_share = {probe_share!r} is not a share in [0, 1]")
    if old_log_prob.shape != probe_prob.shape:
        raise ValueError(f"old_log_prob {tuple(old_log_prob.shape)} and probe_prob "
                         f"{tuple(probe_prob.shape)} must have one shape")
    if bool((probe_prob < 0).any()):
        raise ValueError("probe_prob holds a negative probability")
    policy_part = old_log_prob + _log(1.0 - probe_share)
    probe_part = torch.log(probe_prob.to(old_log_prob.dtype)) + _log(probe_share)
    return torch.logaddexp(policy_part, probe_part)


def pool_next_token_probs(pool: Sequence[Sequence[int]], inserted: Sequence[int]) -> list[float]:
    """The pool's next-token probability of each token of ``inserted`` (one of ``pool``'s prompts).

    At position ``t``: among the pool's prompts that start with ``inserted[:t]`` and are longer
    than ``t``, the share whose token ``t`` is ``inserted[t]`` (at ``t = 0`` every prompt is a
    candidate): the probability that drawing a prompt uniformly from the pool, given the tokens
    so far, continues with this token.
    """
    prompts = [list(p) for p in pool]
    inserted = list(inserted)
    if inserted not in prompts:
        raise ValueError("inserted is not one of the pool's prompts")
    probs = []
    for t, token in enumerate(inserted):
        candidates = [p for p in prompts if len(p) > t and p[:t] == inserted[:t]]
        probs.append(sum(p[t] == token for p in candidates) / len(candidates))
    return probs


def probe_prefix_prob(old_log_prob: Tensor, failure_rate: float) -> Tensor:
    """``exp(old_log_prob) / failure_rate^(1/j)`` for the ``j`` tokens of a probe's prefix
    (``j`` = the length of ``old_log_prob``, shape ``(j,)``).

    The prefix was sampled by the policy, then probed because the trajectory failed, which
    happens with probability ``failure_rate`` (``z``, in (0, 1]); dividing each of the ``j``
    tokens by ``z^(1/j)`` spreads that over the prefix, so the product over the prefix is
    ``π_old(prefix) / z``.
    """
    if not 0.0 < failure_rate <= 1.0:
        raise ValueError(f"failure_rate = {failure_rate!r} must lie in (0, 1]: with no failed "
                         "policy trajectory nothing is probed")
    if old_log_prob.dim() != 1:
        raise ValueError(f"old_log_prob must be one probe's prefix, shape (j,), got "
                         f"{tuple(old_log_prob.shape)}")
    j = old_log_prob.shape[0]
    if j == 0:
        return old_log_prob.exp()
    return (old_log_prob - math.log(failure_rate) / j).exp()


def probe_ranking(prompt_log_probs: Sequence[Tensor]) -> list[int]:
    """Probe indices, most likely first under the old policy: by the mean of each probe's
    inserted-prompt token log-probs (shape ``(tokens,)`` each); ties keep the earlier probe first."""
    means = []
    for i, log_probs in enumerate(prompt_log_probs):
        if log_probs.numel() == 0:
            raise ValueError(f"probe {i} has no inserted prompt tokens to rank it by")
        means.append(float(log_probs.float().mean()))
    return sorted(range(len(means)), key=lambda i: -means[i])


def probes_to_keep(keep_ratio: float, questions: int, group_size: int) -> int:
    """How many probes the filter keeps in a step of ``questions`` × ``group_size`` policy
    trajectories: ``keep_ratio`` of them, rounded to the nearest whole probe (halves up)."""
    if not 0.0 <= keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio = {keep_ratio!r} is not a share in [0, 1]")
    return math.floor(keep_ratio * questions * group_size + 0.5)


def updated_keep_ratio(keep_ratio: float, probe_accuracy: float, weight: float = 0.1,
                       cap: float = 1.0) -> float:
    """The next step's keep ratio: an exponential average moving ``weight`` of the way from
    ``keep_ratio`` towards the probes' accuracy this step, never above ``cap`` (the
    configured ratio: the most probes ever kept)."""
    return min(cap, (1.0 - weight) * keep_ratio + weight * probe_accuracy)


ROLES = ("policy", "prefix", "prompt", "continuation")
"""Token roles in a corrected batch (``probe_token_probs``): every loss token of a policy
trajectory; on a probe, its loss tokens before the inserted prompt, the prompt's tokens, and
its loss tokens after the prompt."""


def prompt_token_probs(pool_ids: Sequence[Sequence[int]], prompt: int,
                       correction: str) -> list[float]:
    """μ on the tokens of pool prompt ``prompt``: the pool's own distribution (``fine``), or
    1/|pool| then 1 (``coarse``)."""
    if correction == "fine":
        return pool_next_token_probs(pool_ids, pool_ids[prompt])
    if correction == "coarse":
        return [1.0 / len(pool_ids)] + [1.0] * (len(pool_ids[prompt]) - 1)
    raise ValueError(f"correction {correction!r} has no probe policy: choose fine or coarse")


def probe_token_probs(old_log_prob: Tensor, roles: Mapping[str, Tensor],
                      prompts: Sequence[int | None], pool_ids: Sequence[Sequence[int]], *,
                      failure_rate: float, correction: str) -> Tensor:
    """μ of every token ``(batch, seq)``: 0 on policy rows (``prompts[row]`` None) and off the
    roles' tokens; on a probe row (the index of the pool prompt it inserted),
    ``probe_prefix_prob`` on its prefix, ``prompt_token_probs`` on its prompt and π_old on its
    continuation. ``roles``: role → bool mask ``(batch, seq)`` (``ROLES``)."""
    mu = torch.zeros_like(old_log_prob)
    for row, prompt in enumerate(prompts):
        if prompt is None:
            continue
        prefix = roles["prefix"][row]
        mu[row, prefix] = probe_prefix_prob(old_log_prob[row, prefix], failure_rate)
        prompt_at = roles["prompt"][row].nonzero().flatten()
        probs = prompt_token_probs(pool_ids, prompt, correction)
        mu[row, prompt_at] = torch.tensor(probs[:len(prompt_at)], dtype=mu.dtype)
        after = roles["continuation"][row]
        mu[row, after] = old_log_prob[row, after].exp()
    return mu


def corrected_log_probs(old_log_prob: Tensor, roles: Mapping[str, Tensor],
                        prompts: Sequence[int | None], pool_ids: Sequence[Sequence[int]], *,
                        probe_share: float, failure_rate: float,
                        correction: str) -> tuple[Tensor, dict[str, float]]:
    """log μ_mix of every token (``behaviour_log_prob`` of ``probe_token_probs``) and the mean
    importance ratio π_old/μ_mix of each role's tokens (roles without tokens left out)."""
    mu = probe_token_probs(old_log_prob, roles, prompts, pool_ids, failure_rate=failure_rate,
                           correction=correction)
    behaviour = behaviour_log_prob(old_log_prob, mu, probe_share)
    ratio = (old_log_prob - behaviour).exp()
    ratios = {role: float(ratio[mask].mean()) for role, mask in roles.items() if bool(mask.any())}
    return behaviour, ratios


def _log(x: float) -> float:
    """``log x`` with ``log 0 = −inf`` (a share of 0 drops its part of the mixture)."""
    return math.log(x) if x > 0 else -math.inf
