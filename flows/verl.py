"""Flow `rl-verl`: a recipe trained by verl's trainer on GPUs, with the lineage the local
engine leaves in MLflow.

one MLflow run (the config, the data version, each verl run's composed config; verl's own
metrics join it through its MLflow logger, ``MLFLOW_RUN_ID``) → the recipe's upstream curation
with the start policy on this machine, where it has one → each of the recipe's verl runs
(``Recipe.verl_runs``; GRPO: one; UR²: stage 1 and stage 2, the second from the first's merged
checkpoint), its checkpoints mirrored to the bucket and resumed from it where one is set →
the newest checkpoint merged back
(``advrag.engines.verl.checkpoints``) → registered with its provenance → benchmarked like a
local run's (``evaluate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from advrag.common.locks import exclusive
from advrag.config.flows import VerlSection
from advrag.engines.local.checkpoint_store import CheckpointStore
from advrag.engines.verl import checkpoints, launch, mirror
from advrag.engines.verl.runs import VerlRun
from advrag.flows.rl import benchmark_stages, curate_with
from advrag.recipes.base import Recipe
from advrag.tasks import data, rl, tracking


@flow(name="rl-verl", log_prints=True)
def rl_on_verl(recipe: Recipe, settings: VerlSection, start_model: str | None = None,
               run_name: str | None = None, parent: str | None = None,
               tags: dict[str, str] | None = None) -> dict:
    """Train ``recipe`` with verl from ``start_model`` (default: the config's model) as
    ``settings`` say (its ``retriever_url`` set), then bring its model back; the run nests
    under ``parent`` if given."""
    if settings.retriever_url is None:
        raise ValueError("rl-verl needs settings.retriever_url: the server its rollouts search")
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
        step, model_dir = train_runs(recipe, settings, start_model, run_id)
        primary = recipe.agents[0]
        versions = rl.register(recipe, run_id, {primary: model_dir}, version["digest"])
        tracking.set_tags(run_id, {"verl.step": str(step)})
        print(f"verl's step {step} → {model_dir} → {recipe.registry_names()[primary]} "
              f"v{versions[primary]}")
    results = {"run_id": run_id, "step": step, "model_dir": str(model_dir),
               "versions": versions, "version": versions[primary]}
    if config.evaluate is not None:
        results |= benchmark_stages(recipe, run_name, start_model, {primary: model_dir},
                                    versions)
    return results


def train_runs(recipe: Recipe, settings: VerlSection, start_model: str,
               run_id: str) -> tuple[int, Path]:
    """The recipe's upstream curation with the start policy (here, nested; none for most), then
    each of its verl runs (``Recipe.verl_runs``) from the one before's merged model: the last
    one's (step, directory)."""
    from advrag.models.loading import resolve_model_dir

    config = recipe.config
    curate_with(recipe, start_model, run_id)
    model, step = resolve_model_dir(start_model), 0
    for run in recipe.verl_runs():
        hydra_overrides, composed = prepare_run(recipe.config, run, settings, model)
        root = launch.run_root(config, run)
        run_verl(hydra_overrides, composed, run_id, run.tracked_as, root)
        step, model = merged(root, launch.export_root(config, run))
    return step, model


def prepare_run(config, run: VerlRun, settings: VerlSection,
                model_path: str | Path) -> tuple[list[str], Any]:
    """``run``'s data, agent loop file and composed config under ``settings.out_dir``; its
    Hydra overrides and composed config."""
    return launch.prepare(config, run, settings.out_dir, model_path=str(model_path),
                          retriever_url=settings.retriever_url, gpus=settings.gpus,
                          nodes=settings.nodes)


def run_verl(hydra_overrides: list[str], composed, run_id: str, name: str, root: Path) -> None:
    """verl's trainer with ``hydra_overrides`` (its composed config logged as
    ``<name>/ppo_trainer.yaml``), checkpointing into ``root``; an error exit fails the run.
    With ``ADVRAG_ARTIFACT_BUCKET`` set, the bucket's newer steps of ``root`` are pulled first
    (verl resumes from the newest) and each step verl completes is pushed as it is written
    (``engines.verl.mirror``): a run whose worker was lost resumes on a fresh one."""
    from omegaconf import OmegaConf

    tracking.log_text(run_id, OmegaConf.to_yaml(composed), f"{name}/ppo_trainer.yaml")
    store = CheckpointStore.from_environment(layout=mirror.VERL_STEPS)
    if store is not None and (resumed := mirror.pull_latest(store, root)) is not None:
        print(f"verl resumes from step {resumed} (the bucket's newest complete step of {root})")
    with mirror.mirrored(store, root):
        status = launch.launch(hydra_overrides, run_id=run_id)
    if status != 0:
        raise RuntimeError(f"verl's trainer exited with status {status}; its log is above")


def merged(root: Path, export: Path) -> tuple[int, Path]:
    """The newest checkpoint under verl's ``root`` merged into ``export/step-<N>``."""
    step, actor = checkpoints.latest_actor(root)
    return step, checkpoints.merge_to_hf(actor, export / f"step-{step}")
