"""REX-RAG's policy correction on an encoded batch: token roles, the probe policy μ per
token, and the mixture behaviour log-prob the clipped ratio is taken against.

Token roles (``token_roles``): on a policy trajectory every loss token is ``policy``; on a
probe, the loss tokens before its inserted prompt are ``prefix``, the prompt's tokens
``prompt`` and the loss tokens after it ``continuation``. Documents and hints are masked
from the loss and have no role.

μ per role (``core.rex_rag.probe_token_probs``), with ``correction``:

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

from advrag.agents.types import Trajectory
from advrag.core.rex_rag import corrected_log_probs
from advrag.engines.local.tokenize import Batch


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
        prompts = [None if t.probe is None else t.probe.prompt for t in self.trajectories]
        behaviour, self.ratios = corrected_log_probs(
            old_logprobs, token_roles(batch, self.trajectories), prompts, self.pool_ids,
            probe_share=self.probe_share, failure_rate=self.failure_rate,
            correction=self.correction)
        return behaviour
