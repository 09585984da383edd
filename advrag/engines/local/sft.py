"""Supervised fine-tuning on demonstration trajectories (the warm-up before RL).

The loss is the mean negative log-likelihood of the policy's own tokens
(``Batch.loss_mask``: prompts and retrieved passages are context, never
targets), averaged over all such tokens of a step's batch; micro-batches are
weighted by their token share, so accumulation equals one full-batch loss.
Each epoch walks a seeded permutation of the demonstrations; a step is one
AdamW update with gradient clipping. bf16 autocast follows the policy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

from advrag.agents.types import Trajectory
from advrag.common import console
from advrag.config.engine import SFTConfig
from advrag.engines.local.logprobs import micro_batches
from advrag.engines.local.policy import TrainablePolicy, adamw
from advrag.engines.local.tokenize import Batch, encode_trajectories, refuse_cut


def nll_loss(logprobs: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``−logprobs`` over the masked tokens ``(batch, seq)`` (divide by the count)."""
    return -(logprobs * loss_mask).sum()


def sft_step(
    policy: TrainablePolicy, optimizer: torch.optim.Optimizer, batch: Batch, config: SFTConfig
) -> dict[str, float]:
    """One AdamW step on ``batch``; returns the mean token NLL, token count and grad norm."""
    tokens = int(batch.loss_mask.sum())
    if tokens == 0:
        raise ValueError("the SFT batch has no policy tokens to learn from")
    total = 0.0
    with policy.training():
        optimizer.zero_grad(set_to_none=True)
        for index in micro_batches(batch.attention_mask, config.micro_batch_size):
            part = batch.select(index)
            loss = nll_loss(policy.logprobs_with_grad(part)[0], part.loss_mask) / tokens
            loss.backward()
            total += float(loss.detach())
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), config.grad_clip)
    if torch.isfinite(grad_norm):
        optimizer.step()
    return {"loss": total, "tokens": float(tokens), "grad_norm": float(grad_norm)}


def batches_of(n: int, config: SFTConfig) -> list[list[int]]:
    """Row indices of every step: ``epochs`` seeded permutations cut into ``batch_size`` slices."""
    order: list[int] = []
    for epoch in range(config.epochs):
        perm = list(range(n))
        random.Random(config.seed + epoch).shuffle(perm)
        order.extend(perm)
    return [order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)]


def supervised_finetune(
    policy: TrainablePolicy,
    tokenizer,
    demonstrations: Sequence[Trajectory],
    config: SFTConfig,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    setting: str = "warmup.sft.max_seq_len",
) -> list[dict[str, float]]:
    """Fine-tune ``policy`` on ``demonstrations``; returns each step's metrics.

    A demonstration longer than ``config.max_seq_len`` is refused before any step, naming
    ``setting`` (where the budget is set); ``on_step(step, metrics)`` is called after every
    update (logging, progress).
    """
    if not demonstrations:
        raise ValueError("no demonstrations to fine-tune on; check the data and max_turns")
    refuse_cut(demonstrations, tokenizer, config.max_seq_len, setting)
    optimizer = adamw(policy.trainable_parameters(), lr=config.lr, weight_decay=0.0)
    history = []
    batches = batches_of(len(demonstrations), config)
    with console.progress("warm-up", sum(map(len, batches)), "demonstrations") as bar:
        for step, rows in enumerate(batches):
            batch = encode_trajectories(
                [demonstrations[i] for i in rows], tokenizer, max_len=config.max_seq_len
            ).to(policy.device)
            metrics = sft_step(policy, optimizer, batch, config)
            history.append(metrics)
            bar.set_postfix_str(f"loss {metrics['loss']:.3f}", refresh=False)
            bar.update(len(rows))
            if on_step is not None:
                on_step(step, metrics)
    return history
