"""REX-RAG's policy correction on an encoded batch: token roles, the probe policy μ per
token, and the mixture behaviour log-prob the clipped ratio is taken against.

Token roles (``token_roles``): on a policy trajectory every loss token is ``policy``; on a
probe, the loss tokens before its inserted prompt are ``prefix``, the prompt's tokens
``prompt`` and the loss tokens after it ``continuation``. Documents and hints are masked
from the loss and have no role.

μ per role (``probe_token_probs``), with ``correction``:

- ``policy``: 0 (a policy trajectory is not a probe);
- ``prefix``: ``probe_prefix_prob`` (π_old·z^(−1/j), j = the prefix's loss tokens);
- ``prompt``: ``fine`` — the pool's next-token distribution (``pool_next_token_probs``);
  ``coarse`` — 1/|pool| on the first token, 1 on the others;
- ``continuation``: π_old.

How this departs from the release: its ``j`` counts every response token before the
prompt (retrieved documents included); here ``j`` counts the tokens the policy sampled,
the ones the loss sees.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from advrag.agents.prompts import probe_observation
from advrag.agents.types import Trajectory
from advrag.core.rex_rag import behaviour_log_prob, pool_next_token_probs, probe_prefix_prob
from advrag.engines.local.tokenize import Batch

ROLES = ("policy", "prefix", "prompt", "continuation")


def token_roles(batch: Batch, trajectories: Sequence[Trajectory]) -> dict[str, Tensor]:
    """Role → bool mask ``(batch, seq)``; rows align with ``trajectories``."""
    segment, loss = batch.segment_ids, batch.loss_mask
    probe_segment = torch.tensor([-1 if t.probe is None else t.probe.segment
                                  for t in trajectories], device=segment.device)[:, None]
    is_probe = probe_segment >= 0
    return {
        "policy": loss & ~is_probe,
        "prefix": loss & is_probe & (segment < probe_segment),
        "prompt": is_probe & (segment == probe_segment),
        "continuation": loss & is_probe & (segment > probe_segment),
    }


def pool_token_ids(pool: Sequence[str], tokenizer) -> list[list[int]]:
    """Each pool prompt's tokens as a probe inserts it (the encoder tokenises each segment alone)."""
    return [tokenizer(probe_observation(p), add_special_tokens=False)["input_ids"] for p in pool]


def prompt_token_probs(pool_ids: Sequence[Sequence[int]], prompt: int, correction: str) -> list[float]:
    """μ on the tokens of pool prompt ``prompt``: the pool's own distribution (``fine``), or
    1/|pool| then 1 (``coarse``)."""
    if correction == "fine":
        return pool_next_token_probs(pool_ids, pool_ids[prompt])
    if correction == "coarse":
        return [1.0 / len(pool_ids)] + [1.0] * (len(pool_ids[prompt]) - 1)
    raise ValueError(f"correction {correction!r} has no probe policy: choose fine or coarse")


def probe_token_probs(old_logprobs: Tensor, roles: dict[str, Tensor],
                      trajectories: Sequence[Trajectory], pool_ids: Sequence[Sequence[int]], *,
                      failure_rate: float, correction: str) -> Tensor:
    """μ of every token ``(batch, seq)`` (0 off the roles' tokens); see the module docstring."""
    mu = torch.zeros_like(old_logprobs)
    for row, trajectory in enumerate(trajectories):
        if trajectory.probe is None:
            continue
        prefix = roles["prefix"][row]
        mu[row, prefix] = probe_prefix_prob(old_logprobs[row, prefix], failure_rate)
        prompt_at = roles["prompt"][row].nonzero().flatten()
        probs = prompt_token_probs(pool_ids, trajectory.probe.prompt, correction)
        mu[row, prompt_at] = torch.tensor(probs[:len(prompt_at)], dtype=mu.dtype)
        after = roles["continuation"][row]
        mu[row, after] = old_logprobs[row, after].exp()
    return mu


class Correction:
    """The trainer's behaviour-log-prob hook for one update, and what it saw.

    ``probe_share``: the kept probes' share of the batch (``a``); ``failure_rate``: ``z``.
    After the hook ran, ``ratios`` holds the mean π_old/μ_mix of each role's tokens.
    """

    def __init__(self, trajectories: Sequence[Trajectory], pool_ids: Sequence[Sequence[int]], *,
                 probe_share: float, failure_rate: float, correction: str):
        self.trajectories = list(trajectories)
        self.pool_ids = pool_ids
        self.probe_share = probe_share
        self.failure_rate = failure_rate
        self.correction = correction
        self.ratios: dict[str, float] = {}

    def __call__(self, batch: Batch, old_logprobs: Tensor) -> Tensor:
        """log μ_mix of every token (``core.rex_rag.behaviour_log_prob``)."""
        roles = token_roles(batch, self.trajectories)
        mu = probe_token_probs(old_logprobs, roles, self.trajectories, self.pool_ids,
                               failure_rate=self.failure_rate, correction=self.correction)
        behaviour = behaviour_log_prob(old_logprobs, mu, self.probe_share)
        ratio = (old_logprobs - behaviour).exp()
        self.ratios = {role: float(ratio[mask].mean()) for role, mask in roles.items()
                       if bool(mask.any())}
        return behaviour
