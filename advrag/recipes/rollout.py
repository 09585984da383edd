"""The rollout pieces every recipe shares: the Search-R1 rollout of a step's questions, its
typed settings, scoring, the step's rollout metrics, the reward and agent types, and the
grounded search demonstrations of the warm-up.

Recipes import these; no recipe package imports another (``pyproject.toml``'s import-linter
contract "Recipes stand side by side"). Torch is imported on first use: a config is checked
without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator
from advrag.datasets.records import QARecord

if TYPE_CHECKING:
    import torch

RewardFn = Callable[[Trajectory, QARecord], float]
Agent = Callable[[Sequence[QARecord]], list[Trajectory]]
"""Runs an episode per record (in order): the rollout shape of a recipe."""


@dataclass(frozen=True)
class RolloutSettings:
    """The Search-R1 loop's budgets for one rollout (``run_search_agent``'s defaults)."""

    max_turns: int = 4
    topk: int = 3
    max_new_tokens: int = 256

    @classmethod
    def of(cls, config) -> RolloutSettings:
        """A recipe config's own (its ``max_turns``, ``topk``, ``max_new_tokens``)."""
        return cls(config.max_turns, config.topk, config.max_new_tokens)

    def search_options(self) -> dict[str, int]:
        """As ``run_search_agent``'s keyword arguments."""
        return dataclasses.asdict(self)


def rollout(
    records: Sequence[QARecord],
    generator: TextGenerator,
    retriever: Retriever,
    *,
    group_size: int,
    settings: RolloutSettings = RolloutSettings(),
    agent: Agent | None = None,
) -> tuple[list[Trajectory], list[QARecord]]:
    """Run the agent ``group_size`` times on every record, all in one batched loop.

    ``agent`` replaces the Search-R1 loop (``settings`` then go unused).
    Returns the trajectories and, aligned with them, the record each answers
    (each record repeated ``group_size`` times in a row).
    """
    repeated = [record for record in records for _ in range(group_size)]
    if agent is not None:
        return agent(repeated), repeated
    trajectories = run_search_agent([record.question for record in repeated], generator,
                                    retriever, **settings.search_options())
    return trajectories, repeated


def score(
    trajectories: Sequence[Trajectory], records: Sequence[QARecord], reward_fn: RewardFn
) -> torch.Tensor:
    """One reward per trajectory, ``(batch,)`` float32."""
    import torch

    rewards = [reward_fn(t, r) for t, r in zip(trajectories, records, strict=True)]
    return torch.tensor(rewards, dtype=torch.float32)


def rollout_metrics(trajectories: Sequence[Trajectory], scores: torch.Tensor,
                    group_ids: Sequence[str]) -> dict[str, float]:
    """Reward mean/std (unbiased; 0 for one rollout), the share of groups with a learning
    signal (rewards not all equal), and the agent's behaviour per trajectory."""
    from advrag.core.advantages import informative_group_fraction

    n = len(trajectories)
    return {
        "reward_mean": float(scores.mean()),
        "reward_std": float(scores.std()) if n > 1 else 0.0,
        "informative_groups": informative_group_fraction(scores, group_ids),
        "searches": sum(t.n_searches for t in trajectories) / n,
        "turns": sum(t.n_turns for t in trajectories) / n,
        "format_errors": sum(t.format_errors for t in trajectories) / n,
        "answered_fraction": sum(t.answer is not None for t in trajectories) / n,
        "cut_turns": sum(t.cut_turns for t in trajectories),
    }


def search_demonstrations(config, records: Sequence[QARecord], retriever: Retriever,
                          chat_prompt) -> list[Trajectory]:
    """The Search-R1 warm-up set of a single-reasoner config (``topk``, ``max_turns``, ``warmup``)."""
    from advrag.curation.demonstrations import build_demonstrations

    return build_demonstrations(records, retriever, chat_prompt, topk=config.topk,
                                max_turns=config.max_turns, limit=config.warmup.demonstrations)
