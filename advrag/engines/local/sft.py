"""Supervised fine-tuning on demonstration trajectories (the warm-up before RL).

The loss is the mean negative log-likelihood of the policy's own tokens
(``Batch.loss_mask``: prompts and retrieved passages are context, never
targets), averaged over all such tokens of a step's batch; micro-batches are
weighted by their token share, so accumulation equals one full-batch loss.
Each epoch walks a seeded permutation of the demonstrations; a step is one
AdamW update with gradient clipping. bf16 autocast follows the policy.

With ``EarlyStopping`` the epochs run one at a time: after each, a dev measure (data kept
apart from training and from the final held-out measure) scores the policy; the best
epoch's weights are kept (``save``), ``patience`` epochs without a better score end the
run, and the best weights are put back (``restore``). With its ``progress_dir``, each
finished epoch is kept there too, and a killed run resumes after it.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from advrag.agents.types import Trajectory
from advrag.common import console
from advrag.common.fileio import atomic_dir
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


@dataclass(frozen=True)
class EarlyStopping:
    """Epoch-by-epoch SFT against a dev measure (module docstring).

    Attributes:
        measure: the dev scores of the policy as it is (``{"auroc": …, "loss": …}``).
        key: the score that chooses (higher is better).
        patience: epochs without a higher ``key`` before the run ends.
        save: keeps the current weights as the best (an atomic write).
        restore: puts the best weights back at the end.
        on_epoch: called with ``(epoch, scores)`` after each measure (logging); on a resumed
            run, first for each epoch the killed run had finished.
        progress_dir: where each finished epoch leaves the weights, the optimizer and the
            scores so far (atomically), and where a killed run resumes from; None = no resume.
    """

    measure: Callable[[], dict[str, float]]
    key: str
    patience: int
    save: Callable[[], None]
    restore: Callable[[], None]
    on_epoch: Callable[[int, dict[str, float]], None] | None = None
    progress_dir: Path | None = None


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
    optimizer = _prepared(policy, tokenizer, demonstrations, config, setting, "demonstrations")
    with console.progress("warm-up", len(demonstrations) * config.epochs,
                          "demonstrations") as bar:
        return _run_steps(policy, optimizer, tokenizer, demonstrations,
                          batches_of(len(demonstrations), config), config, bar, on_step)


def early_stopped_finetune(
    policy: TrainablePolicy,
    tokenizer,
    examples: Sequence[Trajectory],
    config: SFTConfig,
    stopping: EarlyStopping,
    *,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    setting: str = "sft.max_seq_len",
    label: str = "SFT",
    what: str = "examples",
) -> dict[str, float]:
    """Fine-tune ``policy`` on ``examples`` epoch by epoch against ``stopping``'s dev
    measure (module docstring); the best epoch (from 1), its scores and the epochs run. With
    ``stopping.progress_dir`` a killed run goes on after the last epoch it finished."""
    optimizer = _prepared(policy, tokenizer, examples, config, setting, what)
    digest = examples_digest(examples)
    history = resumed_epochs(stopping.progress_dir, policy, optimizer, digest, config)
    for epoch, scores in enumerate(history):
        if stopping.on_epoch is not None:
            stopping.on_epoch(epoch, scores)
    per_epoch = len(batches_of(len(examples), config.model_copy(update={"epochs": 1})))
    with console.progress(label, len(examples) * config.epochs, what,
                          initial=len(examples) * len(history)) as bar:
        while len(history) < config.epochs and not patience_spent(history, stopping):
            epoch = len(history)
            one = config.model_copy(update={"epochs": 1, "seed": config.seed + epoch})
            _run_steps(policy, optimizer, tokenizer, examples, batches_of(len(examples), one),
                       one, bar, on_step, first=per_epoch * epoch)
            scores = stopping.measure()
            bar.set_postfix_str(f"dev {stopping.key} {scores[stopping.key]:.3f}",
                                refresh=False)
            if stopping.on_epoch is not None:
                stopping.on_epoch(epoch, scores)
            if not history or scores[stopping.key] > max(h[stopping.key] for h in history):
                stopping.save()
            history.append(scores)
            save_progress(stopping.progress_dir, policy, optimizer, history, digest, config)
    stopping.restore()
    best_epoch = best_of(history, stopping.key)
    return {"best_epoch": float(best_epoch + 1), "epochs_run": float(len(history)),
            **{f"dev_{k}": v for k, v in history[best_epoch].items()}}


def best_of(history: Sequence[dict[str, float]], key: str) -> int:
    """The first epoch with the highest ``key``."""
    return max(range(len(history)), key=lambda e: (history[e][key], -e))


def patience_spent(history: Sequence[dict[str, float]], stopping: EarlyStopping) -> bool:
    """``patience`` epochs have passed without a higher score than the best one's."""
    return bool(history) and len(history) - 1 - best_of(history, stopping.key) >= stopping.patience


def examples_digest(examples: Sequence[Trajectory]) -> str:
    """SHA-256 of the examples' texts, in order: what a resumed run must train on again."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.text.encode() + b"\0")
    return digest.hexdigest()


def save_progress(directory: Path | None, policy: TrainablePolicy, optimizer, history: list,
                  examples: str, config: SFTConfig) -> None:
    """The finished epochs' weights, optimizer state and scores, swapped in atomically."""
    if directory is None:
        return
    with atomic_dir(directory) as tmp:
        policy.save_weights(tmp / "weights")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "progress.json").write_text(json.dumps(
            {"history": history, "examples": examples, "config": config.model_dump(mode="json")},
            indent=1))


def resumed_epochs(directory: Path | None, policy: TrainablePolicy, optimizer, examples: str,
                   config: SFTConfig) -> list[dict[str, float]]:
    """The scores of the epochs a killed run finished, its weights and optimizer put back
    (none without ``directory`` or its progress); refused if made with other settings."""
    marker = None if directory is None else Path(directory) / "progress.json"
    if marker is None or not marker.is_file():
        return []
    saved = json.loads(marker.read_text())
    if saved["examples"] != examples or saved["config"] != config.model_dump(mode="json"):
        raise ValueError(f"{directory} holds the SFT progress of another run (other examples "
                         "or settings); delete it to start afresh")
    policy.load_weights(Path(directory) / "weights")
    optimizer.load_state_dict(torch.load(Path(directory) / "optimizer.pt"))
    print(f"resuming SFT after epoch {len(saved['history'])} ({directory})")
    return saved["history"]


def _prepared(policy, tokenizer, examples, config: SFTConfig, setting: str, what: str):
    """The run's optimizer, once ``examples`` are known to exist and to fit ``max_seq_len``."""
    if not examples:
        raise ValueError(f"no {what} to fine-tune on; check the data and max_turns")
    refuse_cut(examples, tokenizer, config.max_seq_len, setting, what)
    return adamw(policy.trainable_parameters(), lr=config.lr, weight_decay=0.0)


def _run_steps(policy, optimizer, tokenizer, demonstrations, batches, config: SFTConfig, bar,
               on_step, first: int = 0) -> list[dict[str, float]]:
    """One update per batch of row indices; each step's metrics (steps counted from ``first``)."""
    history = []
    for step, rows in enumerate(batches, start=first):
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
