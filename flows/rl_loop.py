"""The wiring every RL training flow shares: warm start, the update loop, benchmarking."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from advrag.config import AdversarialRLConfig, BenchmarkConfig, TrainFlowConfig
from flows.benchmark import benchmark
from tasks import benchmark as bench
from tasks import tracking
from tasks.train import budget_spent

RLFlowConfig = TrainFlowConfig | AdversarialRLConfig


def warm_start(config: RLFlowConfig, run_id: str, warm_up: Callable) -> tuple:
    """Retriever, training questions and the model RL starts from (after ``warm_up``, if set)."""
    retriever = bench.load_retriever(retrieval_settings(config))
    records = bench.load_questions("world", retrieval_settings(config, split="train"))
    if config.warmup is None:
        return retriever, records, config.model
    warm_dir, warm_history = warm_up(config, retriever, records)
    for i, metrics in enumerate(warm_history):
        tracking.log_metrics(run_id, prefixed("warmup/", metrics), step=i)
    return retriever, records, str(warm_dir)


def run_updates(
    config: RLFlowConfig,
    run_id: str,
    first_step: int,
    update: Callable[[int], dict[str, float]],
    checkpoint: Callable[[int], dict[str, Path]],
    describe: Callable[[dict[str, float]], str],
) -> list[dict[str, float]]:
    """(update → log → print → checkpoint)* from ``first_step`` to ``config.steps``.

    ``update(step)`` returns the step's metrics; ``checkpoint(next_step)`` saves
    and returns ``{artifact path: directory}`` to log. Every ``checkpoint_every``
    updates, and after the last one, a checkpoint is taken. The last is
    ``config.steps`` or the update that spends ``max_train_minutes``.
    """
    history, started = [], time.perf_counter()
    for step in range(first_step, config.steps):
        metrics = update(step)
        tracking.log_metrics(run_id, metrics, step=step)
        history.append({"step": step, **metrics})
        print(f"update {step + 1}/{config.steps}: {describe(metrics)}")
        last = step + 1 == config.steps or budget_spent(started, config.max_train_minutes)
        if (step + 1) % config.checkpoint_every == 0 or last:
            for artifact_path, path in checkpoint(step + 1).items():
                tracking.log_artifacts(run_id, path, artifact_path)
        if last:
            break
    return history


def benchmark_models(
    settings: BenchmarkConfig, run_name: str, models: dict[str, dict]
) -> tuple[dict, dict]:
    """Benchmark each named model (``settings`` updated with its fields) as ``run_name-name``.

    Returns the results by name and the last model's whole evaluation.
    """
    results, evaluation = {}, {}
    for name, fields in models.items():
        evaluation = benchmark(settings.model_copy(update=fields), run_name=f"{run_name}-{name}")
        results[name] = evaluation["results"]
    return results, evaluation


def prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    """``{"loss": 1}`` → ``{"warmup/loss": 1}``."""
    return {prefix + key: value for key, value in metrics.items()}


def benchmark_tags(evaluation: dict) -> dict[str, str]:
    """Registry tags of a benchmark: its run id and EM/F1 per (dataset, method)."""
    tags = {"bench.run_id": evaluation["run_id"]}
    for (method, dataset), summary in evaluation["results"].items():
        for key in ("em", "f1", "n"):
            tags[f"bench.{dataset}.{method}.{key}"] = f"{summary[key]:.4f}"
    return tags


def retrieval_settings(config: RLFlowConfig, split: str = "test") -> BenchmarkConfig:
    """The benchmark-shaped settings the shared loaders take."""
    return BenchmarkConfig(
        world_dir=config.world_dir, index_dir=config.index_dir, split=split, limit=None
    )
