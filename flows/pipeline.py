"""Flow `pipeline`: the design card's chain, one run with a nested run per stage.

data refresh → GX gate (prepare_data raises on bad data, so a version trained
here carries ``data.gate = passed`` for the promotion gate) → `dvc repro` → reasoner warm-up → (UR² curation, inside
the RL stage when the recipe is ur2) → GAR slice labelling + discriminator SFT →
joint RL (the config's recipe: gar, arr, ur2, grpo) → benchmark of base, warm-up
and trained reasoner → promotion gate. A stage whose inputs (settings, data
version, upstream outputs) are unchanged is skipped; a killed pipeline resumes:
the warm-up and curation are cached, RL resumes from its checkpoints.
"""

from __future__ import annotations

from prefect import flow

from advrag.config import PipelineConfig, load_config
from advrag.flows.nightly import promotion_gate
from advrag.flows.prepare_data import prepare_data
from advrag.flows.rl import run_recipe
from advrag.recipes import recipe_for
from advrag.recipes.base import Recipe
from advrag.tasks import curation, rl, tracking
from advrag.tasks import pipeline as stages
from advrag.tasks import promotion as promo

DEFAULT_CONFIG = "configs/pipeline.yaml"


@flow(name="pipeline", log_prints=True)
def pipeline(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Data → warm-up → discriminator SFT → joint RL → benchmark → promotion (module docstring)."""
    config = as_config(config)
    digest = prepare_data(config.data)["digest"]
    recipe = recipe_for(config.recipe)
    recipe.config = recipe.config.model_copy(update={"experiment": config.experiment})
    tracking.configure()
    tags = {"data.version": digest, "flow": "pipeline", "recipe": recipe.name}
    params = {"pipeline": config.model_dump(mode="json"), "data": digest}
    with tracking.tracked_run(config.experiment, "pipeline", params=params, tags=tags) as run_id:
        start = warm_up_stage(recipe, run_id)
        upstream = [digest, curation.fingerprint(start)[1]]
        judge = discriminator_stage(config, recipe, start, upstream, run_id)
        trained = rl_stage(config, recipe, [*upstream, judge and judge["run_id"]], run_id)
        name, version = recipe.registry_names()[recipe.agents[0]], trained["versions"][recipe.agents[0]]
        promo.record_gate(name, version, {"data.gate": "passed", "data.gate.digest": digest}, digest)
        decision = promotion_gate(name, recipe.config.evaluate, config.promotion, version)
        summary = report(run_id, trained, judge, decision)
    print(summary)
    return {"run_id": run_id, "data_version": digest, "trained": trained,
            "discriminator": judge, "decision": decision}


def warm_up_stage(recipe: Recipe, parent: str) -> str:
    """The reasoner's SFT warm-up (cached by its settings) in a nested run; the start model."""
    if recipe.config.warmup is None:
        return recipe.config.model
    retriever, records = rl.training_data(recipe.config)
    with tracking.tracked_run(recipe.config.experiment, "warm-up", parent=parent) as run_id:
        model_dir, history = rl.warm_up(recipe, retriever, records)
        for i, metrics in enumerate(history):
            tracking.log_metrics(run_id, {f"warmup/{k}": v for k, v in metrics.items()}, step=i)
    return str(model_dir)


def discriminator_stage(config: PipelineConfig, recipe: Recipe, start: str, upstream: list,
                        parent: str) -> dict | None:
    """GAR's slice labelling + discriminator SFT on the start model; its adapter goes to the recipe."""
    if recipe.name != "gar" or recipe.config.discriminator == "none" or config.discriminator is None:
        return None
    from advrag.config import DiscriminatorSFTConfig, config_hash
    from advrag.flows.discriminator_sft import discriminator_sft

    sft = load_config(config.discriminator, DiscriminatorSFTConfig).model_copy(
        update={"experiment": config.experiment})
    key = stages.stage_key(config_hash(sft, exclude={"experiment"}), *upstream)
    result = stages.finished_stage(config.cache_dir, "discriminator", key)
    if result is None:
        result = discriminator_sft(sft, base=start, parent=parent)
        stages.record_stage(config.cache_dir, "discriminator", key, result)
    recipe.config = recipe.config.model_copy(
        update={"discriminator_adapter": result["adapter_dir"]})
    return result


def rl_stage(config: PipelineConfig, recipe: Recipe, upstream: list, parent: str) -> dict:
    """Joint RL + benchmark of base/warm-up/trained (skipped when already done on these inputs)."""
    key = stages.stage_key(recipe.settings_hash(), recipe.config.steps, *upstream)
    result = stages.finished_stage(config.cache_dir, "rl", key)
    if result is None:
        result = run_recipe(recipe, "pipeline", recipe.name, parent=parent)
        stages.record_stage(config.cache_dir, "rl", key, jsonable(result))
    return jsonable(result)


def jsonable(result: dict) -> dict:
    """The RL result with its benchmark keys ``(method, dataset)`` as ``method/dataset``."""
    return {k: {"/".join(m) if isinstance(m, tuple) else m: v for m, v in value.items()}
            if k in ("base", "warmup", "trained") else value for k, value in result.items()}


def report(run_id: str, trained: dict, judge: dict | None, decision: dict) -> str:
    """The pipeline's table (logged as ``pipeline.md``): reasoner before/after, judge, decision."""
    from advrag.evaluation.reports import pipeline_markdown

    text = pipeline_markdown(trained, judge, decision)
    tracking.log_text(run_id, text, "pipeline.md")
    return text


def as_config(config: PipelineConfig | str) -> PipelineConfig:
    """A config object as is, a path read and validated."""
    return config if isinstance(config, PipelineConfig) else load_config(config, PipelineConfig)
