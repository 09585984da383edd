"""Flow `adversarial_rl`: ARR's reasoner and verifier trained jointly, tracked, registered, benchmarked."""

from __future__ import annotations

import time

from prefect import flow

from advrag import dataplane
from advrag.config import AdversarialRLConfig
from flows.rl_loop import benchmark_models, benchmark_tags, run_updates, warm_start
from tasks import arr, tracking
from tasks.train import batch_for_step


@flow(name="adversarial_rl", log_prints=True)
def adversarial_rl(config: AdversarialRLConfig = AdversarialRLConfig(), run_name: str = "arr") -> dict:
    """Warm-up → resume → (batch → ARR step → log → checkpoint)* → plots → export → register ×2 → benchmark."""
    tracking.configure()
    version = dataplane.data_version()
    params = {"config": config.model_dump(mode="json"), "data": version}
    tags = {"data.version": version["digest"], "flow": "adversarial_rl", "method": config.method,
            "model": config.model}
    with tracking.tracked_run(config.experiment, run_name, params=params, tags=tags) as run_id:
        retriever, records, start_model = warm_start(config, run_id, arr.warm_up)
        dual, generators = arr.build_agents(config, start_model)
        traces, started = [], time.perf_counter()

        def update(step: int) -> dict[str, float]:
            batch = batch_for_step(records, step, config.questions_per_step, dual["reasoner"].config.seed)
            result = arr.train_step(dual, generators, retriever, batch, config)
            traces.append(result.traces)
            return result.metrics

        def checkpoint(next_step: int) -> dict:
            saved = arr.save_checkpoints(dual, config, next_step)
            return {f"checkpoints/{agent}": path for agent, path in saved.items()}

        history = run_updates(config, run_id, arr.resume_latest(dual, config), update, checkpoint,
                              describe_update)
        if history:
            tracking.log_figure(run_id, arr.reward_curves(history), "reward_curves.png")
            tracking.log_figure(run_id, arr.entropy_figure(traces), "entropy_trajectories.png")
        model_dirs = arr.export_models(dual, config.checkpoint_dir / "final")
        provenance = {"data.version": version["digest"], "run_id": run_id,
                      "config.hash": arr.method_hash(config), "git.commit": tracking.git_commit()}
        versions = {agent: tracking.register_model_dir(
            run_id, model_dirs[agent], name, tags={**provenance, "agent": agent},
            artifact_path=f"model/{agent}") for agent, name in registry_names(config).items()}
    results = {"run_id": run_id, "model_dirs": {a: str(p) for a, p in model_dirs.items()},
               "versions": versions, "steps_run": len(history),
               "train_s": time.perf_counter() - started}
    if config.evaluate is not None:
        pairs = {"base": {"model": config.model, "verifier_model": config.verifier_model},
                 "warmup": {"model": start_model, "verifier_model": None},
                 "trained": {"model": str(model_dirs["reasoner"]),
                             "verifier_model": str(model_dirs["verifier"])}}
        if start_model == config.model:
            del pairs["warmup"]
        scores, evaluation = benchmark_models(config.evaluate, run_name, pairs)
        results.update(scores)
        for agent, registered in registry_names(config).items():
            tracking.set_model_version_tags(registered, versions[agent], benchmark_tags(evaluation))
    return results


def describe_update(metrics: dict[str, float]) -> str:
    """The progress line of one joint update."""
    return (f"reward reasoner {metrics['reasoner/reward_mean']:.3f}, verifier "
            f"{metrics['verifier/reward_mean']:.3f}, {metrics['time/step_s']:.0f} s")


def registry_names(config: AdversarialRLConfig) -> dict[str, str]:
    """Agent → registered model name."""
    return {"reasoner": config.registered_reasoner, "verifier": config.registered_verifier}
