"""The ``grpo`` recipe's update on the Search-R1 agent, as named steps: rollout → score → update.

The generator must sample from the trainer's own weights: either build it on
``trainer.policy.model`` (the same object, so every update is visible to the
next rollout without copying), or give it a ``push_weights(model)`` method
(a separate inference engine such as vLLM), which is called after every
update. Sample with ``temperature > 0``. Rollouts run with the
model in ``eval()`` mode (the policy's resting mode; the update switches to
``train()`` and back).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator
from advrag.core.advantages import informative_group_fraction
from advrag.datasets.records import QARecord
from advrag.engines.local.trainer import LocalTrainer, push_updated_weights

RewardFn = Callable[[Trajectory, QARecord], float]
Agent = Callable[[Sequence[QARecord]], list[Trajectory]]
"""Runs an episode per record (in order): the rollout shape of a recipe."""


def rollout(
    records: Sequence[QARecord],
    generator: TextGenerator,
    retriever: Retriever,
    *,
    group_size: int,
    rollout_kwargs: Mapping[str, Any] | None = None,
    agent: Agent | None = None,
) -> tuple[list[Trajectory], list[QARecord]]:
    """Run the agent ``group_size`` times on every record, all in one batched loop.

    ``agent`` replaces the Search-R1 loop (``rollout_kwargs`` then go unused).
    Returns the trajectories and, aligned with them, the record each answers
    (each record repeated ``group_size`` times in a row).
    """
    repeated = [record for record in records for _ in range(group_size)]
    if agent is not None:
        return agent(repeated), repeated
    trajectories = run_search_agent(
        [record.question for record in repeated], generator, retriever, **(rollout_kwargs or {})
    )
    return trajectories, repeated


def score(
    trajectories: Sequence[Trajectory], records: Sequence[QARecord], reward_fn: RewardFn
) -> torch.Tensor:
    """One reward per trajectory, ``(batch,)`` float32."""
    rewards = [reward_fn(t, r) for t, r in zip(trajectories, records, strict=True)]
    return torch.tensor(rewards, dtype=torch.float32)


def rollout_metrics(trajectories: Sequence[Trajectory], scores: torch.Tensor,
                    group_ids: Sequence[str]) -> dict[str, float]:
    """Reward mean/std (unbiased; 0 for one rollout), the share of groups with a learning
    signal (rewards not all equal), and the agent's behaviour per trajectory."""
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


def grpo_step(
    trainer: LocalTrainer,
    generator: TextGenerator,
    retriever: Retriever,
    records: Sequence[QARecord],
    *,
    group_size: int,
    reward_fn: RewardFn,
    rollout_kwargs: Mapping[str, Any] | None = None,
    agent: Agent | None = None,
) -> dict[str, float]:
    """Rollout (``group_size`` per record) → score → update; returns all metrics.

    The metrics include the step's time split: ``rollout_s``, ``score_s`` and
    ``update_s`` (the update includes pushing weights to the generator).

    Args:
        records: the questions of this step; their ids are the GRPO group ids.
        reward_fn: ``(trajectory, record) → reward``.
        rollout_kwargs: for ``run_search_agent`` (``max_turns``, ``topk``, ``max_new_tokens``).
        agent: another episode shape than the Search-R1 loop (see ``rollout``).
    """
    timer = time.perf_counter
    trainer.policy.model.eval()
    started = timer()
    trajectories, repeated = rollout(
        records,
        generator,
        retriever,
        group_size=group_size,
        rollout_kwargs=rollout_kwargs,
        agent=agent,
    )
    rolled = timer()
    scores = score(trajectories, repeated, reward_fn)
    scored = timer()
    metrics = trainer.update(trajectories, scores, [record.id for record in repeated]).metrics
    push_updated_weights(generator, trainer)
    seconds = {"rollout_s": rolled - started, "score_s": scored - rolled,
               "update_s": timer() - scored}
    return rollout_metrics(trajectories, scores, [r.id for r in repeated]) | metrics | seconds
