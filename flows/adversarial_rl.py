"""Flow `adversarial_rl`: ARR's reasoner and verifier trained jointly, tracked, registered, benchmarked."""

from __future__ import annotations

import time

from prefect import flow

from advrag import dataplane
from advrag.config import AdversarialRLConfig
from flows.benchmark import benchmark
from flows.train import benchmark_tags, prefixed, retrieval_settings
from tasks import arr, tracking
from tasks import benchmark as bench
from tasks.train import batch_for_step, budget_spent


@flow(name="adversarial_rl", log_prints=True)
def adversarial_rl(config: AdversarialRLConfig = AdversarialRLConfig(), run_name: str = "arr") -> dict:
    """Warm-up → resume → (batch → ARR step → log → checkpoint)* → plots → export → register ×2 → benchmark."""
    tracking.configure()
    version = dataplane.data_version()
    params = {"config": config.model_dump(mode="json"), "data": version}
    tags = {"data.version": version["digest"], "flow": "adversarial_rl", "method": config.method,
            "model": config.model}
    with tracking.tracked_run(config.experiment, run_name, params=params, tags=tags) as run_id:
        retriever = bench.load_retriever(retrieval_settings(config))
        records = bench.load_questions("world", retrieval_settings(config, split="train"))
        start_model = config.model
        if config.warmup is not None:
            warm_dir, warm_history = arr.warm_up(config, retriever, records)
            for i, metrics in enumerate(warm_history):
                tracking.log_metrics(run_id, prefixed("warmup/", metrics), step=i)
            start_model = str(warm_dir)
        dual, generators = arr.build_agents(config, start_model)
        history, traces, started = [], [], time.perf_counter()
        for step in range(arr.resume_latest(dual, config), config.steps):
            batch = batch_for_step(records, step, config.questions_per_step, dual["reasoner"].config.seed)
            result = arr.train_step(dual, generators, retriever, batch, config)
            tracking.log_metrics(run_id, result.metrics, step=step)
            history.append({"step": step, **result.metrics})
            traces.append(result.traces)
            print(f"update {step + 1}/{config.steps}: reward reasoner "
                  f"{result.metrics['reasoner/reward_mean']:.3f}, verifier "
                  f"{result.metrics['verifier/reward_mean']:.3f}, "
                  f"{result.metrics['time/step_s']:.0f} s")
            last = step + 1 == config.steps or budget_spent(started, config.max_train_minutes)
            if (step + 1) % config.checkpoint_every == 0 or last:
                for agent, path in arr.save_checkpoints(dual, config, step + 1).items():
                    tracking.log_artifacts(run_id, path, f"checkpoints/{agent}")
            if last:
                break
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
        pairs = {"base": (config.model, config.verifier_model),
                 "warmup": (start_model, None),
                 "trained": (str(model_dirs["reasoner"]), str(model_dirs["verifier"]))}
        for name, (reasoner, verifier) in pairs.items():
            if name == "warmup" and start_model == config.model:
                continue
            evaluation = benchmark(config.evaluate.model_copy(
                update={"model": reasoner, "verifier_model": verifier}), run_name=f"{run_name}-{name}")
            results[name] = evaluation["results"]
        for agent, registered in registry_names(config).items():
            tracking.set_model_version_tags(registered, versions[agent], benchmark_tags(evaluation))
    return results


def registry_names(config: AdversarialRLConfig) -> dict[str, str]:
    """Agent → registered model name."""
    return {"reasoner": config.registered_reasoner, "verifier": config.registered_verifier}
