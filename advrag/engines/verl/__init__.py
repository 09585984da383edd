"""advrag's algorithms inside verl: a plugin verl loads at start-up.

verl (0.9.1) imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` and the
``verl.plugins`` entry points of installed packages (advrag's names this module) when
``verl`` is imported. Importing this module registers, under names verl's config can
select:

- our advantage estimators as ``advrag_<name>`` (``algorithm.adv_estimator``):
  ``advrag_grpo``, ``advrag_drgrpo``, ``advrag_reinforce_pp`` — every estimator in
  ``core.advantages.ADVANTAGE_ESTIMATORS``, with verl's calling convention
  (``token_level_rewards``, ``response_mask``, ``index``, ``config``) and return value
  ``(advantages, returns)``;
- our PPO policy loss as ``advrag_ppo`` (``actor_rollout_ref.actor.policy_loss.loss_mode``),
  with verl's convention (``old_log_prob``, ``log_prob``, ``advantages``, ``response_mask``,
  ``loss_agg_mode``, ``config``) and the actor config's clip settings.

How these differ from verl's own ``grpo`` and ``vanilla``, by design
(``core.advantages``, ``core.losses``): a group of one rollout gets GRPO advantage 0
(verl passes its raw score through), and the loss aggregates over the micro-batch it is
given (``core.losses.aggregate_loss``), so with several data-parallel ranks its
token-mean is per rank where verl's is over the global batch. Rollout correction weights
(``rollout_is_weights``) are refused: REX-RAG's correction reaches the loss through the
old log-probs instead.

Rewards: ``advrag.engines.verl.rewards`` (verl's ``reward.custom_reward_function``); agent
loops: ``advrag.engines.verl.agent_loop``; REX-RAG's trainer:
``advrag.engines.verl.rex_trainer``, imported only by a run that selects it (it needs verl's
V1 trainer and TransferQueue).

Only this package imports verl; the rest of advrag runs without it (``make verl``
installs it on a CPU for the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from advrag.core.advantages import ADVANTAGE_ESTIMATORS
from advrag.core.losses import policy_loss

PREFIX = "advrag_"
"""Every name this plugin registers in verl starts with it."""


def verl_estimator(name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    """Our estimator ``name`` with verl's signature: each response's score is the sum of its
    token-level rewards; ``index`` (verl's ``uid`` per response) groups the rollouts of one
    prompt. Returns ``(advantages, returns)``, equal, as verl's outcome estimators do."""
    estimator = ADVANTAGE_ESTIMATORS[name]

    def estimate(token_level_rewards: Tensor, response_mask: Tensor, index: Any = None,
                 config: Any = None, **_: Any) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(f"{PREFIX}{name} needs verl's per-response uid (index) to group "
                             "the rollouts of one prompt")
        scores = token_level_rewards.sum(dim=-1)
        with torch.no_grad():
            advantages = estimator(scores, [str(i) for i in index], response_mask)
        advantages = advantages.to(token_level_rewards.dtype) * response_mask
        return advantages, advantages

    estimate.__name__ = f"{PREFIX}{name}"
    estimate.__doc__ = f"advrag's {name!r} advantage estimator, called as verl calls its own."
    return estimate


def verl_policy_loss(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor,
                     response_mask: Tensor, loss_agg_mode: str = "token-mean",
                     config: Any = None,
                     rollout_is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Any]]:
    """Our PPO clipped surrogate with the actor config's ``clip_ratio`` (``_low``/``_high``)
    and ``clip_ratio_c`` (dual clip), named as verl's metrics are."""
    if config is None:
        raise ValueError(f"{PREFIX}ppo needs verl's actor config (its clip ratios)")
    if rollout_is_weights is not None:
        raise ValueError(f"{PREFIX}ppo takes no rollout correction weights: turn off "
                         "algorithm.rollout_correction, or use verl's own loss")
    clip = config.clip_ratio
    loss, metrics = policy_loss(
        log_prob, old_log_prob, advantages, response_mask,
        clip_low=clip if config.clip_ratio_low is None else config.clip_ratio_low,
        clip_high=clip if config.clip_ratio_high is None else config.clip_ratio_high,
        dual_clip=config.get("clip_ratio_c", 3.0), agg=loss_agg_mode)
    return loss, {"actor/pg_clipfrac": metrics["clip_fraction"],
                  "actor/ppo_kl": metrics["approx_kl"],
                  "actor/pg_clipfrac_lower": metrics["dual_clip_fraction"]}


def register() -> list[str]:
    """Register every estimator and the loss in verl's registries (idempotent); their names."""
    from verl.trainer.ppo import core_algos

    names = []
    for name in ADVANTAGE_ESTIMATORS:
        full = f"{PREFIX}{name}"
        if full not in core_algos.ADV_ESTIMATOR_REGISTRY:
            core_algos.register_adv_est(full)(verl_estimator(name))
        names.append(full)
    core_algos.register_policy_loss(f"{PREFIX}ppo")(verl_policy_loss)
    return [*names, f"{PREFIX}ppo"]


REGISTERED = register()
"""What verl can select once this module is imported."""
