"""Flow `rl-verl`: a recipe trained by verl's trainer on GPUs, with the lineage the local
engine leaves in MLflow.

one MLflow run (the config, the data version, verl's composed config; verl's own metrics join
it through its MLflow logger, ``MLFLOW_RUN_ID``) → verl's trainer → its newest checkpoint
merged back (``advrag.engines.verl.checkpoints``) → registered with its provenance →
benchmarked like a local run's (``evaluate``).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from advrag.common.locks import exclusive
from advrag.engines.verl import checkpoints, launch
from advrag.flows.rl import benchmark_stages
from advrag.recipes.base import Recipe
from advrag.tasks import data, rl, tracking


@flow(name="rl-verl", log_prints=True)
def rl_on_verl(recipe: Recipe, hydra_overrides: list[str], composed: str,
               run_name: str | None = None, start_model: str | None = None,
               parent: str | None = None, tags: dict[str, str] | None = None) -> dict:
    """Train ``recipe`` with verl (``hydra_overrides`` from ``launch.prepare``, starting from
    ``start_model``, default the config's model; ``composed``: the config verl composes from
    them, logged), then bring its model back; the run nests under ``parent`` if given."""
    config = recipe.config
    run_name = run_name or f"{recipe.name}-verl"
    start_model = start_model or config.model
    tracking.configure()
    version = data.data_version()
    params = {"config": config.model_dump(mode="json"), "data": version}
    tags = {"data.version": version["digest"], "flow": "rl-verl", "recipe": recipe.name,
            "model": start_model, "engine": "verl", **(tags or {})}
    with exclusive(config.checkpoint_dir, "the checkpoint directory"), \
            tracking.tracked_run(config.experiment, run_name, params=params, tags=tags,
                                 parent=parent) as run_id:
        tracking.log_text(run_id, composed, "verl/ppo_trainer.yaml")
        status = launch.launch(hydra_overrides, run_id=run_id)
        if status != 0:
            raise RuntimeError(f"verl's trainer exited with status {status}; its log is above")
        results = import_run(recipe, run_id, version["digest"])
    if config.evaluate is not None:
        results |= benchmark_stages(recipe, run_name, start_model,
                                    {recipe.agents[0]: Path(results["model_dir"])},
                                    results["versions"])
    return results


def import_run(recipe: Recipe, run_id: str, data_digest: str) -> dict:
    """The newest checkpoint verl saved for ``recipe`` merged into ``checkpoint_dir/verl-export``
    and registered under the run, as ``rl.register`` does for the local engine."""
    root = Path(recipe.config.checkpoint_dir)
    step, actor = checkpoints.latest_actor(root / launch.CHECKPOINTS)
    model_dir = checkpoints.merge_to_hf(actor, root / "verl-export" / f"step-{step}")
    primary = recipe.agents[0]
    versions = rl.register(recipe, run_id, {primary: model_dir}, data_digest)
    tracking.set_tags(run_id, {"verl.step": str(step)})
    print(f"verl's step {step} → {model_dir} → {recipe.registry_names()[primary]} "
          f"v{versions[primary]}")
    return {"run_id": run_id, "step": step, "model_dir": str(model_dir), "versions": versions,
            "version": versions[primary]}
