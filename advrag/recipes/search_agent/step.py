"""The single search agent's plain update (``grpo`` and ``ur2`` without exploration), as named
steps: rollout → score → update.

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
from collections.abc import Sequence

from advrag.common.types import Retriever, TextGenerator
from advrag.datasets.records import QARecord
from advrag.engines.local.trainer import LocalTrainer, push_updated_weights
from advrag.recipes.rollout import Agent, RewardFn, RolloutSettings, rollout, rollout_metrics, score


def grpo_step(
    trainer: LocalTrainer,
    generator: TextGenerator,
    retriever: Retriever,
    records: Sequence[QARecord],
    *,
    group_size: int,
    reward_fn: RewardFn,
    settings: RolloutSettings = RolloutSettings(),
    agent: Agent | None = None,
) -> dict[str, float]:
    """Rollout (``group_size`` per record) → score → update; returns all metrics.

    The metrics include the step's time split: ``rollout_s``, ``score_s`` and
    ``update_s`` (the update includes pushing weights to the generator).

    Args:
        records: the questions of this step; their ids are the GRPO group ids.
        reward_fn: ``(trajectory, record) → reward``.
        settings: the Search-R1 loop's budgets (``max_turns``, ``topk``, ``max_new_tokens``).
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
        settings=settings,
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
