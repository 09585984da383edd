"""Flow `train`: GRPO on the Search-R1-style agent, tracked in MLflow, then benchmarked."""

from __future__ import annotations

import time

from prefect import flow

from advrag import dataplane
from advrag.config import TrainFlowConfig
from advrag.engines.local.checkpoint import config_hash
from flows.rl_loop import benchmark_models, benchmark_tags, run_updates, warm_start
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
        retriever, records, start_model = warm_start(config, run_id, tr.warm_up)
        trainer, generator = tr.build_trainer(config, start_model)
        started = time.perf_counter()

        def update(step: int) -> dict[str, float]:
            batch = tr.batch_for_step(records, step, config.questions_per_step, trainer.config.seed)
            return tr.train_step(trainer, generator, retriever, batch, config)

        def checkpoint(next_step: int) -> dict:
            return {"checkpoints": tr.save_checkpoint(trainer, config.checkpoint_dir, next_step)}

        first_step = tr.resume_latest(trainer, config.checkpoint_dir, generator)
        history = run_updates(config, run_id, first_step, update, checkpoint, describe_update)
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
        models = {"base": {"model": config.model}, "warmup": {"model": start_model},
                  "trained": {"model": str(model_dir)}}
        if start_model == config.model:
            del models["warmup"]
        scores, evaluation = benchmark_models(config.evaluate, run_name, models)
        results.update(scores)
        tracking.set_model_version_tags(
            config.registered_model, model_version, benchmark_tags(evaluation)
        )
    return results


def describe_update(metrics: dict[str, float]) -> str:
    """The progress line of one GRPO update."""
    seconds = metrics["rollout_s"] + metrics["score_s"] + metrics["update_s"]
    return f"reward {metrics['reward_mean']:.3f}, loss {metrics['loss']:.4f}, {seconds:.0f} s"
