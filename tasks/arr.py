"""Prefect tasks of ARR training: a reasoner and a verifier trained jointly (local engine)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.config import AdversarialRLConfig
from advrag.datasets.records import QARecord

# settings a checkpoint must share with the run that resumes it (beyond the optimizer's)
METHOD_FIELDS = {"method", "policies", "model", "verifier_model", "lora", "warmup", "group_size",
                 "max_turns", "topk", "max_new_tokens", "temperature", "lam", "n_bins", "delta",
                 "pattern_scores", "critique_actions", "monitored_actions", "adversarial_reward",
                 "process_advantage", "format_penalty", "questions_per_step"}


def agent_configs(config: AdversarialRLConfig):
    """Each agent's TrainConfig: ``optim`` (+ ``verifier_optim`` for the verifier), group size G."""
    from advrag.engines.local.trainer import TrainConfig

    shared = {**config.optim, "group_size": config.group_size}
    return {"reasoner": TrainConfig(**shared),
            "verifier": TrainConfig(**(shared | config.verifier_optim))}


@task(cache_policy=NO_CACHE)
def warm_up(config: AdversarialRLConfig, retriever, records: list[QARecord]):
    """SFT on grounded ARR dialogues (both roles), merged into the base: where both agents start.

    Returns ``(model_dir, per-step metrics)``; ``checkpoint_dir/warmup`` is reused by
    reruns (no metrics then) and refused if it was made with other settings.
    """
    from advrag.curation.arr_demonstrations import (
        build_arr_demonstrations,
        demonstration_trajectories,
    )
    from advrag.engines.local.generation import HFGenerator
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.sft import SFTConfig, supervised_finetune
    from models.loading import load_policy
    from tasks.train import _reuse_warmup, save_merged

    out = config.checkpoint_dir / "warmup"
    settings = {"model": config.model, "lora": config.lora, "max_turns": config.max_turns,
                "topk": config.topk, **config.warmup.model_dump()}
    if _reuse_warmup(out, settings):
        return out, []
    loaded = load_policy(config.model, dtype="float32")
    lora = LoraSettings(**config.lora) if config.lora is not None else None
    policy = TrainablePolicy(loaded.model, lora=lora, keep_reference=False,
                             cpu_bf16=config.cpu_bf16)
    dialogues = build_arr_demonstrations(
        records, retriever, HFGenerator(policy.model, loaded.tokenizer).chat_prompt,
        topk=config.topk, max_turns=config.max_turns, limit=config.warmup.demonstrations)
    history = supervised_finetune(policy, loaded.tokenizer, demonstration_trajectories(dialogues),
                                  SFTConfig(**config.warmup.sft))
    save_merged(policy.model, loaded.tokenizer, out, settings)
    return out, history


@task(cache_policy=NO_CACHE)
def build_agents(config: AdversarialRLConfig, model_spec: str | None = None):
    """Both agents (adapters on one base, or two models), their trainers and generators.

    ``model_spec`` (e.g. the warm-up's model) replaces ``config.model`` as the start.
    """
    from advrag.engines.local import dual as d
    from advrag.engines.local.policy import LoraSettings
    from advrag.engines.local.trainer import seed_everything
    from models.loading import load_policy

    configs = agent_configs(config)
    seed_everything(configs["reasoner"].seed)  # adapter initialisation draws random numbers
    lora = LoraSettings(**config.lora) if config.lora is not None else None
    loaded = {"reasoner": load_policy(model_spec or config.model, dtype="float32")}
    if config.policies == "shared_lora":
        policies = d.shared_lora_policies(loaded["reasoner"].model, lora, cpu_bf16=config.cpu_bf16)
        loaded["verifier"] = loaded["reasoner"]
    else:
        verifier = config.verifier_model or model_spec or config.model
        loaded["verifier"] = load_policy(verifier, dtype="float32")
        policies = d.separate_policies(
            {name: p.model for name, p in loaded.items()}, lora, cpu_bf16=config.cpu_bf16,
            keep_reference=any(c.kl_coef > 0 for c in configs.values()))
    tokenizers = {name: p.tokenizer for name, p in loaded.items()}
    return (d.DualTrainer.build(policies, tokenizers, configs),
            d.agent_generators(policies, tokenizers, temperature=config.temperature))


def method_hash(config: AdversarialRLConfig) -> str:
    """Short hash of the settings a resumed run must keep (rewards, rollouts, models)."""
    settings = config.model_dump(mode="json", include=METHOD_FIELDS)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


@task(cache_policy=NO_CACHE)
def resume_latest(dual, config: AdversarialRLConfig) -> int:
    """Resume both agents from their newest common checkpoint; returns the next step."""
    state = dual.resume(config.checkpoint_dir)
    if state is None:
        return 0
    if state["extra"].get("method_hash") != method_hash(config):
        raise ValueError(f"{config.checkpoint_dir} was written with other ARR settings: resume "
                         "with the same config or use another checkpoint_dir")
    return int(state["data_position"])


def settings(config: AdversarialRLConfig):
    """The engine's view of the config (``ArrSettings``)."""
    from advrag.engines.local.arr_step import ArrSettings

    return ArrSettings(
        lam=config.lam, n_bins=config.n_bins, delta=config.delta,
        pattern_scores=dict(config.pattern_scores), adversarial_reward=config.adversarial_reward,
        process_advantage=config.process_advantage, format_penalty=config.format_penalty,
        critique_actions=tuple(config.critique_actions),
        monitored_actions=tuple(config.monitored_actions), group_size=config.group_size,
        max_turns=config.max_turns, topk=config.topk, max_new_tokens=config.max_new_tokens,
    )


@task(cache_policy=NO_CACHE)
def train_step(dual, generators, retriever, records: list[QARecord], config: AdversarialRLConfig):
    """One joint update: rollout → score → reasoner update → verifier update."""
    from advrag.engines.local.arr_step import arr_step

    return arr_step(dual, generators, retriever, records, settings(config))


@task(cache_policy=NO_CACHE)
def save_checkpoints(dual, config: AdversarialRLConfig, next_step: int) -> dict[str, Path]:
    """Checkpoint both agents after ``next_step`` updates; returns agent → directory."""
    return dual.save(config.checkpoint_dir, data_position=next_step,
                     extra={"method_hash": method_hash(config)})


@task(cache_policy=NO_CACHE)
def export_models(dual, out_dir: Path) -> dict[str, Path]:
    """Each trained agent as a plain transformers checkpoint (LoRA merged) under ``out_dir``."""
    return dual.export(out_dir)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reward_curves(history: list[dict[str, float]]):
    """Each agent's mean reward and F1 per step."""
    plt = _pyplot()
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for agent in ("reasoner", "verifier"):
        line = ax.plot(steps, [h[f"{agent}/reward_mean"] for h in history], marker="o",
                       label=f"{agent} reward")[0]
        ax.plot(steps, [h[f"{agent}/f1"] for h in history], ls="--", color=line.get_color(),
                label=f"{agent} F1")
    ax.set_xlabel("update")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _turn_means(curves: list[dict[int, float]]) -> dict[int, float]:
    """Mean over dialogues of each turn's value (dialogues without that turn are skipped)."""
    values: dict[int, list[float]] = {}
    for curve in curves:
        for turn, value in curve.items():
            values.setdefault(turn, []).append(value)
    return {turn: sum(v) / len(v) for turn, v in sorted(values.items())}


def entropy_figure(traces_per_step: list[list]):
    """ARR Figure 6: per-turn mean entropy of reasoner think and verifier response.

    Lines split dialogues by correct/incorrect final answer (EM) and the run into
    its first and second half, to show how the trend evolves with training.
    """
    plt = _pyplot()
    half = (len(traces_per_step) + 1) // 2
    phases = {"early": traces_per_step[:half], "late": traces_per_step[half:]}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (attr, title) in zip(axes, (("think", "Reasoner <think>"),
                                        ("response", "Verifier <response>"))):
        for phase, steps in phases.items():
            traces = [t for step in steps for t in step]
            for correct in (True, False):
                curve = _turn_means([getattr(t, attr) for t in traces if t.correct == correct])
                if curve:
                    ax.plot([k + 1 for k in curve], list(curve.values()), marker="o",
                            ls="-" if correct else "--",
                            label=f"{phase}, {'correct' if correct else 'incorrect'}")
        ax.set_title(title)
        ax.set_xlabel("turn")
        ax.set_ylabel("mean token entropy")
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no such actions sampled", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig
