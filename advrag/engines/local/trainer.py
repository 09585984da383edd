"""One RL update of a local policy: encode → old/ref log-probs → advantages → loss → step.

``LocalTrainer.update`` takes scored trajectories (rollouts happen outside,
see ``steps.grpo_step``) and runs the named steps in order. The math is
``advrag.core``'s; this module only batches it and drives the optimizer.

Conventions (where verl, TRL and the papers leave a choice):
- One optimizer step per PPO epoch over the whole batch, with gradients
  accumulated over micro-batches. Each micro-batch's loss is weighted by its
  share of the aggregation's denominator (its unmasked tokens for
  ``token-mean``, its sequences with a token for the ``seq-mean`` modes), so
  the accumulated gradient equals that of one full-batch loss.
- The learning-rate schedule advances once per ``update`` (a training step),
  as verl does, not once per optimizer step; ``total_steps`` counts updates.
  Warm-up is linear, ``(s+1)/warmup_steps`` at step s, then the decay runs
  from 1 at ``warmup_steps`` towards 0 at ``total_steps``.
- ``seq-mean-token-sum-norm`` (Dr.GRPO) normalises by ``max_seq_len``, a
  constant, so the loss does not depend on padding.
- Old log-probs are recomputed with the training model (eval mode, no grad)
  before the first epoch, and ``entropy`` is measured in that pass (the policy
  that sampled) — when the math needs them: several epochs, a behaviour
  log-prob hook, or a recipe that reads the entropy before ``learn``. Otherwise
  (one epoch, the default) the policy has not moved when each micro-batch is
  forwarded, so the old log-probs are the detached current ones (ratio 1, as
  TRL does with one iteration) and the entropy is read from that same forward:
  one pass over the batch fewer, the same gradient. ``kl`` is reported only when
  ``kl_coef > 0`` (no reference pass otherwise).
- Constructing a trainer seeds python, numpy and torch with ``config.seed``;
  loading a checkpoint afterwards restores the run's own RNG state.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from advrag.agents.types import Trajectory
from advrag.common.types import TextGenerator
from advrag.config.base import config_hash
from advrag.config.engine import TrainConfig
from advrag.core.advantages import ADVANTAGE_ESTIMATORS, GroupIds
from advrag.core.losses import POLICY_LOSSES, aggregate_loss, kl_penalty
from advrag.engines.local.checkpoint import load_checkpoint, save_checkpoint
from advrag.engines.local.logprobs import micro_batches
from advrag.engines.local.policy import TrainablePolicy, adamw
from advrag.engines.local.tokenize import Batch, encode_trajectories

BehaviourLogProbFn = Callable[[Batch, Tensor], Tensor]
"""``(batch, old_logprobs (batch, seq)) → the log-probs (batch, seq) the PPO ratio is taken
against``: REX-RAG's mixture behaviour policy (without a hook, the old log-probs)."""


def lr_multiplier(step: int, *, warmup: int, total: int, decay: str) -> float:
    """Learning-rate factor for update ``step`` (0-based): linear warm-up, then the decay."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    if decay == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if decay == "linear":
        return 1.0 - progress
    return 1.0


def seed_everything(seed: int) -> None:
    """Seed python ``random``, numpy and torch (CPU and CUDA) so sampling is reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class UpdateInputs:
    """Everything the loss needs, per token ``(batch, seq)``, computed once per update.

    ``entropy`` is the sampling policy's (from the old-log-prob pass): a recipe
    may read it to add its own advantage terms before ``learn``. Both are None
    when ``prepare`` skipped that pass (on-policy, see the module's conventions):
    ``learn`` then uses the detached current log-probs and measures the entropy.
    ``old_logprobs`` are what the ratio divides by: with a behaviour hook, its result.
    ``prepare_s``: the seconds ``prepare`` took (counted in the update's tokens/s).
    """

    batch: Batch
    old_logprobs: Tensor | None
    ref_logprobs: Tensor | None
    advantages: Tensor
    entropy: Tensor | None
    prepare_s: float = 0.0

    def select(self, index: Tensor) -> UpdateInputs:
        """Rows ``index``, trimmed to the same width as ``Batch.select``."""
        batch = self.batch.select(index)
        width = batch.input_ids.shape[1]

        def cut(values: Tensor | None) -> Tensor | None:
            return None if values is None else values[index, :width]

        return UpdateInputs(
            batch,
            cut(self.old_logprobs),
            cut(self.ref_logprobs),
            cut(self.advantages),
            cut(self.entropy),
        )


@dataclass
class UpdateResult:
    """What one update returns: its metrics, and the batch with the sampling entropy per token."""

    metrics: dict[str, float]
    batch: Batch
    entropy: Tensor


def _denominator(loss_mask: Tensor, agg: str) -> Tensor:
    """What ``aggregate_loss`` divides by: unmasked tokens, or sequences with a token."""
    return loss_mask.sum() if agg == "token-mean" else (loss_mask.sum(dim=1) > 0).sum()


def _share(part: Tensor, whole: Tensor) -> float:
    """``part / whole`` as a float, 0 when ``whole`` is 0."""
    return float(part) / float(whole) if float(whole) > 0 else 0.0


class LocalTrainer:
    """Updates a ``TrainablePolicy`` with AdamW from scored trajectories."""

    def __init__(self, policy: TrainablePolicy, tokenizer, config: TrainConfig):
        """Build the optimizer over the trainable parameters and the lr schedule; seed RNGs."""
        self.policy = policy
        self.tokenizer = tokenizer
        self.config = config
        self.step = 0
        self.optimizer = adamw(
            policy.trainable_parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            partial(
                lr_multiplier,
                warmup=config.warmup_steps,
                total=config.total_steps,
                decay=config.decay,
            ),
        )
        seed_everything(config.seed)

    def save(
        self,
        root: str | Path,
        *,
        data_position: int,
        extra: dict[str, Any] | None = None,
        keep_last: int = 3,
    ) -> Path:
        """Checkpoint the run after ``self.step`` updates (see ``checkpoint.save_checkpoint``)."""
        return save_checkpoint(
            root,
            policy=self.policy,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            step=self.step,
            data_position=data_position,
            config_hash=config_hash(self.config),
            extra=extra,
            keep_last=keep_last,
        )

    def resume(self, directory: str | Path) -> dict[str, Any]:
        """Restore a checkpoint into this freshly built trainer; returns its ``state.json``."""
        state = load_checkpoint(
            directory,
            self.policy,
            self.optimizer,
            self.scheduler,
            expected_config_hash=config_hash(self.config),
        )
        self.step = state["step"]
        return state

    def encode(self, trajectories: Sequence[Trajectory]) -> Batch:
        """Tokenise trajectories onto the policy's device (see ``tokenize``)."""
        batch = encode_trajectories(trajectories, self.tokenizer, max_len=self.config.max_seq_len)
        return batch.to(self.policy.device)

    def update(
        self,
        trajectories: Sequence[Trajectory],
        scores: Sequence[float] | Tensor,
        group_ids: GroupIds,
        behaviour_logprobs: BehaviourLogProbFn | None = None,
    ) -> UpdateResult:
        """One training step on scored trajectories: ``prepare`` then ``learn``.

        Args:
            trajectories: the rollouts, ``batch`` of them.
            scores: one reward per trajectory, ``(batch,)``.
            group_ids: the question each trajectory answers (rollouts of one share it).
            behaviour_logprobs: optional hook giving the log-probs of the policy that
                sampled each token, from the batch and its old log-probs (REX-RAG's
                correction); the clipped ratio is taken against them.
        """
        return self.learn(self.prepare(trajectories, scores, group_ids, behaviour_logprobs))

    def prepare(
        self,
        trajectories: Sequence[Trajectory],
        scores: Sequence[float] | Tensor,
        group_ids: GroupIds,
        behaviour_logprobs: BehaviourLogProbFn | None = None,
        *,
        entropy_first: bool = False,
    ) -> UpdateInputs:
        """Encode, then old and reference log-probs, entropy and outcome advantages (no grad).

        ``entropy_first``: the caller reads ``entropy`` before ``learn`` (ARR's
        verifier), so the old-log-prob pass runs even when the update is on-policy.
        """
        started = time.perf_counter()
        cfg = self.config
        batch = self.encode(trajectories)
        old_logprobs = entropy = None
        if entropy_first or behaviour_logprobs is not None or cfg.ppo_epochs > 1:
            old_logprobs, entropy = self.policy.logprobs(
                batch, micro_batch_size=cfg.micro_batch_size, with_entropy=True
            )
        ref_logprobs = None
        if cfg.kl_coef > 0:
            ref_logprobs = self.policy.reference_logprobs(
                batch, micro_batch_size=cfg.micro_batch_size
            )
        scores = torch.as_tensor(scores, dtype=torch.float32, device=batch.input_ids.device)
        advantages = ADVANTAGE_ESTIMATORS[cfg.advantage](scores, group_ids, batch.loss_mask)
        if behaviour_logprobs is not None:
            old_logprobs = behaviour_logprobs(batch, old_logprobs)
        return UpdateInputs(batch, old_logprobs, ref_logprobs, advantages, entropy,
                            prepare_s=time.perf_counter() - started)

    def learn(self, inputs: UpdateInputs) -> UpdateResult:
        """The optimizer steps on prepared inputs (``ppo_epochs`` of them), then the schedule."""
        started = time.perf_counter()
        if inputs.entropy is None:  # on-policy: the first forward measures it
            inputs = replace(inputs, entropy=torch.zeros_like(inputs.advantages))
            epochs = [self.optimizer_step(inputs, measure_entropy=True)]
        else:
            epochs = [self.optimizer_step(inputs) for _ in range(self.config.ppo_epochs)]
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self.step += 1
        seconds = time.perf_counter() - started + inputs.prepare_s
        metrics = _summarise(inputs.batch, epochs, inputs.entropy, lr=lr, seconds=seconds)
        return UpdateResult(metrics, inputs.batch, inputs.entropy)

    def optimizer_step(self, inputs: UpdateInputs, measure_entropy: bool = False) -> dict[str, float]:
        """Accumulate gradients over micro-batches, clip the norm, take one AdamW step.

        A non-finite gradient norm skips the step (as verl does), so one bad
        batch cannot write NaNs into the weights; ``grad_norm`` then reports it.
        ``measure_entropy``: write each token's entropy into ``inputs.entropy``.
        """
        with self.policy.training():
            self.optimizer.zero_grad(set_to_none=True)
            metrics = self.accumulate_gradients(inputs, measure_entropy)
        params = self.policy.trainable_parameters()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        return metrics | {"grad_norm": float(grad_norm)}

    def accumulate_gradients(self, inputs: UpdateInputs, measure_entropy: bool) -> dict[str, float]:
        """Backward every micro-batch's share of the full-batch loss; returns full-batch metrics."""
        cfg = self.config
        loss_mask = inputs.batch.loss_mask
        loss_total, tokens_total = _denominator(loss_mask, cfg.loss_agg), loss_mask.sum()
        totals: dict[str, float] = {}
        for index in micro_batches(inputs.batch.attention_mask, cfg.micro_batch_size):
            part = inputs.select(index)
            loss_share = _share(_denominator(part.batch.loss_mask, cfg.loss_agg), loss_total)
            token_share = _share(part.batch.loss_mask.sum(), tokens_total)
            loss, terms, token_metrics, entropy = self.micro_batch_loss(part, measure_entropy)
            (loss * loss_share).backward()
            if measure_entropy:
                inputs.entropy[index, : entropy.shape[1]] = entropy.float()
            for name, value in terms.items():
                totals[name] = totals.get(name, 0.0) + value * loss_share
            for name, value in token_metrics.items():
                totals[name] = totals.get(name, 0.0) + value * token_share
        return totals

    def micro_batch_loss(
        self, inputs: UpdateInputs, measure_entropy: bool = False
    ) -> tuple[Tensor, dict[str, float], dict[str, float], Tensor | None]:
        """Loss of one micro-batch: PPO clip surrogate + ``kl_coef``·KL to the reference.

        Returns the scalar loss, its aggregated terms (``loss``, ``pg_loss``,
        ``kl``), token-mean diagnostics from ``core.policy_loss`` and, when
        ``measure_entropy``, the entropy per token (else None). Without old
        log-probs (on-policy) the ratio's denominator is the detached log-prob.
        """
        cfg = self.config
        mask = inputs.batch.loss_mask
        logprobs, entropy = self.policy.logprobs_with_grad(
            inputs.batch, with_entropy=measure_entropy
        )
        old_logprobs = logprobs.detach() if inputs.old_logprobs is None else inputs.old_logprobs
        pg_loss, token_metrics = POLICY_LOSSES[cfg.policy_loss](
            logprobs,
            old_logprobs,
            inputs.advantages,
            mask,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            dual_clip=cfg.dual_clip,
            agg=cfg.loss_agg,
            horizon=cfg.max_seq_len,
        )
        terms = {"pg_loss": pg_loss.item()}
        loss = pg_loss
        if inputs.ref_logprobs is not None:
            kl = aggregate_loss(
                kl_penalty(logprobs, inputs.ref_logprobs, cfg.kl_kind),
                mask,
                cfg.loss_agg,
                horizon=cfg.max_seq_len,
            )
            loss = loss + cfg.kl_coef * kl
            terms["kl"] = kl.item()
        terms["loss"] = loss.item()
        return loss, terms, token_metrics, entropy


def _summarise(
    batch: Batch, epochs: list[dict[str, float]], entropy: Tensor, *, lr: float, seconds: float
) -> dict[str, float]:
    """Metrics of one update: the epochs' mean of the loss terms, plus batch statistics."""
    metrics = {name: sum(e[name] for e in epochs) / len(epochs) for name in epochs[0]}
    mask = batch.loss_mask
    tokens = int(batch.attention_mask.sum())
    return metrics | {
        "entropy": float(torch.where(mask, entropy, 0.0).sum() / mask.sum().clamp(min=1)),
        "lr": lr,
        "tokens": float(tokens),
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "response_length": float(mask.sum(dim=1).float().mean()),
        "truncated_fraction": float(batch.truncated_mask.float().mean()),
    }


def push_updated_weights(generator: TextGenerator, trainer: LocalTrainer) -> None:
    """Give a generator that samples from its own copy of the weights the trainer's new ones."""
    push_weights = getattr(generator, "push_weights", None)
    if push_weights is not None:
        push_weights(trainer.policy.model)
