"""Flow `train`: GRPO on the Search-R1-style agent, tracked in MLflow, then benchmarked."""

from __future__ import annotations

import time

from prefect import flow

from advrag import dataplane
from advrag.config import BenchmarkConfig, TrainFlowConfig
from advrag.engines.local.checkpoint import config_hash
from flows.benchmark import benchmark
from tasks import benchmark as bench
from tasks import tracking
from tasks import train as tr


@flow(name="train", log_prints=True)
def train(config: TrainFlowConfig = TrainFlowConfig(), run_name: str = "grpo") -> dict:
    """Warm-up → resume → (batch → GRPO step → log → checkpoint)* → export → register → benchmark."""
    tracking.configure()
    version = dataplane.data_version()
    params = {"config": config.model_dump(mode="json"), "data": version}
    tags = {"data.version": version["digest"], "flow": "train", "model": config.model}
    with tracking.tracked_run(config.experiment, run_name, params=params, tags=tags) as run_id:
        retriever = bench.load_retriever(retrieval_settings(config))
        records = bench.load_questions("world", retrieval_settings(config, split="train"))
        start_model = config.model
        if config.warmup is not None:
            warm_dir, warm_history = tr.warm_up(config, retriever, records)
            for i, metrics in enumerate(warm_history):
                tracking.log_metrics(run_id, prefixed("warmup/", metrics), step=i)
            start_model = str(warm_dir)
        trainer, generator = tr.build_trainer(config, start_model)
        history, started = [], time.perf_counter()
        for step in range(tr.resume_latest(trainer, config.checkpoint_dir), config.steps):
            batch = tr.batch_for_step(records, step, config.questions_per_step, trainer.config.seed)
            metrics = tr.train_step(trainer, generator, retriever, batch, config)
            tracking.log_metrics(run_id, metrics, step=step)
            history.append({"step": step, **metrics})
            seconds = metrics["rollout_s"] + metrics["score_s"] + metrics["update_s"]
            print(f"update {step + 1}/{config.steps}: reward {metrics['reward_mean']:.3f}, "
                  f"loss {metrics['loss']:.4f}, {seconds:.0f} s")
            last = step + 1 == config.steps or tr.budget_spent(started, config.max_train_minutes)
            if (step + 1) % config.checkpoint_every == 0 or last:
                tracking.log_artifacts(
                    run_id,
                    tr.save_checkpoint(trainer, config.checkpoint_dir, step + 1),
                    "checkpoints",
                )
            if last:
                break
        if history:
            tracking.log_figure(run_id, tr.reward_curve(history), "reward_curve.png")
        model_dir = tr.export_model(trainer, config.checkpoint_dir / "final")
        model_version = tracking.register_model_dir(
            run_id,
            model_dir,
            config.registered_model,
            tags={
                "data.version": version["digest"],
                "run_id": run_id,
                "config.hash": config_hash(config),
                "git.commit": tracking.git_commit(),
            },
        )
    results = {"run_id": run_id, "model_dir": str(model_dir), "version": model_version,
               "steps_run": len(history), "train_s": time.perf_counter() - started}
    if config.evaluate is not None:
        models = {"base": config.model, "warmup": start_model, "trained": str(model_dir)}
        for name, spec in models.items():
            if name == "warmup" and spec == config.model:
                continue
            evaluation = benchmark(
                config.evaluate.model_copy(update={"model": spec}), run_name=f"{run_name}-{name}"
            )
            results[name] = evaluation["results"]
        tracking.set_model_version_tags(
            config.registered_model, model_version, benchmark_tags(evaluation)
        )
    return results


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


def retrieval_settings(config: TrainFlowConfig, split: str = "test") -> BenchmarkConfig:
    """The benchmark-shaped settings the shared loaders take."""
    return BenchmarkConfig(
        world_dir=config.world_dir, index_dir=config.index_dir, split=split, limit=None
    )
