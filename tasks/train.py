"""Prefect tasks of GRPO training with the local engine."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.config import TrainFlowConfig
from advrag.core.rewards import answer_reward
from advrag.datasets.records import QARecord


def trainable_policy(model_spec: str, config: TrainFlowConfig, *, keep_reference: bool):
    """The model of ``model_spec`` as a TrainablePolicy (LoRA or full), and its tokenizer."""
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from models.loading import load_policy

    loaded = load_policy(model_spec, dtype="float32")
    lora = LoraSettings(**config.lora) if config.lora is not None else None
    policy = TrainablePolicy(loaded.model, lora=lora, keep_reference=keep_reference,
                             cpu_bf16=config.cpu_bf16)
    return policy, loaded.tokenizer


@task(cache_policy=NO_CACHE)
def warm_up(config: TrainFlowConfig, retriever, records: list[QARecord]):
    """SFT on grounded demonstrations, merged into the base: where RL starts.

    Returns ``(model_dir, per-step metrics)``. The merged model is kept in
    ``checkpoint_dir/warmup`` and reused by reruns and resumes (no metrics then);
    a directory written under other settings is an error, not silently reused.
    """
    from advrag.curation.demonstrations import build_demonstrations
    from advrag.engines.local.generation import HFGenerator
    from advrag.engines.local.sft import SFTConfig, supervised_finetune

    out = config.checkpoint_dir / "warmup"
    settings = {"model": config.model, "lora": config.lora, **config.warmup.model_dump()}
    if _reuse_warmup(out, settings):
        return out, []
    policy, tokenizer = trainable_policy(config.model, config, keep_reference=False)
    chat_prompt = HFGenerator(policy.model, tokenizer).chat_prompt
    demos = build_demonstrations(records, retriever, chat_prompt, topk=config.topk,
                                 max_turns=config.max_turns, limit=config.warmup.demonstrations)
    history = supervised_finetune(policy, tokenizer, demos, SFTConfig(**config.warmup.sft))
    save_merged(policy.model, tokenizer, out, settings)
    return out, history


def _reuse_warmup(out: Path, settings: dict) -> bool:
    """True if ``out`` holds a warm-up made with ``settings``; raises if made with others."""
    marker = out / "warmup.json"
    if not marker.is_file():
        return False
    if json.loads(marker.read_text()) != json.loads(json.dumps(settings)):
        raise ValueError(f"{out} holds a warm-up made with other settings ({marker}); "
                         "delete it or use another checkpoint_dir.")
    return True


@task(cache_policy=NO_CACHE)
def build_trainer(config: TrainFlowConfig, model_spec: str):
    """Policy of ``model_spec`` (LoRA or full) + trainer + the rollout generator.

    The generator (``config.rollout_backend``) samples the policy's current
    weights in the dtype they are trained in (bf16 on native-bf16 CPUs when
    ``cpu_bf16``; then from a bf16 copy pushed after every update).
    """
    from advrag.engines.generators import make_generator
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from models.loading import resolve_model_dir

    optim = TrainConfig(**config.optim)  # steps may grow across resumes; the schedule may not
    policy, tokenizer = trainable_policy(model_spec, config, keep_reference=optim.kl_coef > 0)
    trainer = LocalTrainer(policy, tokenizer, optim)
    generator = make_generator(config.rollout_backend, policy.model, tokenizer,
                               resolve_model_dir(model_spec), temperature=config.temperature,
                               batch_size=64, autocast=policy.autocast)
    return trainer, generator


@task(cache_policy=NO_CACHE)
def resume_latest(trainer, checkpoint_dir: Path, generator=None) -> int:
    """Resume from the newest checkpoint, if any; returns the next step to run.

    A ``generator`` with its own copy of the weights (``push_weights``) gets the
    resumed ones, so the first rollout after a resume samples the resumed policy.
    """
    from advrag.engines.local.checkpoint import latest_checkpoint

    latest = latest_checkpoint(checkpoint_dir)
    if latest is None:
        return 0
    state = trainer.resume(latest)
    if hasattr(generator, "push_weights"):
        generator.push_weights(trainer.policy.model)
    return int(state["data_position"])


def budget_spent(started: float, minutes: float | None) -> bool:
    """True once ``minutes`` of wall clock have passed since ``started`` (never for None)."""
    return minutes is not None and time.perf_counter() - started >= 60 * minutes


def batch_for_step(records: list[QARecord], step: int, size: int, seed: int) -> list[QARecord]:
    """The questions of one step: epochs walk a seeded permutation (resumable by step)."""
    per_epoch = max(len(records) // size, 1)
    epoch, index = divmod(step, per_epoch)
    order = list(range(len(records)))
    random.Random(seed + epoch).shuffle(order)
    return [records[i] for i in order[index * size : (index + 1) * size]]


@task(cache_policy=NO_CACHE)
def train_step(
    trainer, generator, retriever, records: list[QARecord], config: TrainFlowConfig
) -> dict[str, float]:
    """One GRPO update: rollout → score → advantages → loss → step."""
    from advrag.engines.local.steps import grpo_step

    def reward(trajectory, record: QARecord) -> float:
        return answer_reward(
            trajectory.answer,
            record.golden_answers,
            format_errors=trajectory.format_errors,
            metric=config.reward_metric,
            format_penalty=config.format_penalty,
        )

    return grpo_step(
        trainer,
        generator,
        retriever,
        records,
        reward_fn=reward,
        rollout_kwargs={
            "max_turns": config.max_turns,
            "topk": config.topk,
            "max_new_tokens": config.max_new_tokens,
        },
    )


@task(cache_policy=NO_CACHE)
def save_checkpoint(trainer, checkpoint_dir: Path, next_step: int) -> Path:
    """Checkpoint after ``next_step`` updates (weights, optimizer, scheduler, RNG, data)."""
    return trainer.save(checkpoint_dir, data_position=next_step)


@task(cache_policy=NO_CACHE)
def export_model(trainer, out_dir: Path) -> Path:
    """A plain transformers checkpoint of the trained policy (LoRA merged in)."""
    return save_merged(trainer.policy.model, trainer.tokenizer, out_dir)


def save_merged(model, tokenizer, out_dir: Path, settings: dict | None = None) -> Path:
    """Save ``model`` with any LoRA merged in (and ``settings`` as warmup.json), atomically."""
    from advrag.fileio import atomic_dir

    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if settings is not None:
            (tmp / "warmup.json").write_text(json.dumps(settings, indent=2))
    return out_dir


def reward_curve(history: list[dict[str, float]]):
    """Mean reward (± std) per step: the plot a user looks at first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    mean = [h["reward_mean"] for h in history]
    std = [h["reward_std"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, mean, marker="o", label="reward mean")
    ax.fill_between(
        steps,
        [m - s for m, s in zip(mean, std)],
        [m + s for m, s in zip(mean, std)],
        alpha=0.2,
        label="± std",
    )
    ax.set_xlabel("update")
    ax.set_ylabel("reward")
    ax.legend()
    fig.tight_layout()
    return fig
