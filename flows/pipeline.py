"""Flow `pipeline`: the design card's chain, one run with a nested run per stage.

data refresh → GX gate (prepare_data raises on bad data, so a version trained
here carries ``data.gate = passed`` for the promotion gate) → `dvc repro` → reasoner warm-up → (UR² curation, inside
the RL stage when the recipe is ur2) → GAR slice labelling + discriminator SFT →
joint RL (the config's recipe: gar, arr, ur2, grpo) → benchmark of base, warm-up
and trained reasoner → promotion gate of every model the run registered. A stage
whose inputs (settings, data version, upstream outputs) are unchanged is skipped;
a killed pipeline resumes: the warm-up and curation are cached, RL resumes from
its checkpoints. Checkpoints, the warm-up and the discriminator's adapter live in
directories keyed by their inputs, so new data never resumes from an old run's weights.
The `nightly` flow is this pipeline on the night's config.
"""

from __future__ import annotations

import json

from prefect import flow

from advrag.common.locks import exclusive
from advrag.config import (
    ConfigError,
    DataConfig,
    PipelineConfig,
    config_hash,
    load_config,
)
from advrag.flows.prepare_data import prepare_data
from advrag.flows.promotion import paired_gate, promotion_gate
from advrag.flows.rl import run_recipe
from advrag.recipes import recipe_for
from advrag.recipes.base import Recipe
from advrag.recipes.gar import DiscriminatorSFTConfig
from advrag.tasks import curation, rl, tracking
from advrag.tasks import pipeline as stages
from advrag.tasks import promotion as promo

DEFAULT_CONFIG = "configs/pipeline.yaml"


@flow(name="pipeline", log_prints=True)
def pipeline(config: PipelineConfig | str = DEFAULT_CONFIG, run_name: str = "pipeline") -> dict:
    """Data → warm-up → discriminator SFT → joint RL → benchmark → promotion (module docstring)."""
    config = as_config(config)
    recipe = preflight(config)
    with exclusive(config.data.raw_dir, "the data directory"):  # no rebuild under this run
        return run_stages(config, recipe, run_name)


def preflight(config: PipelineConfig) -> Recipe:
    """The config's recipe, pointed at the pipeline's data, once every check that can fail
    before a stage runs has passed (a ``ConfigError`` naming the fix otherwise)."""
    recipe = recipe_for(config.recipe)
    recipe.configure(**dataset_settings(recipe.config, config.data))
    check_data(config, recipe)
    check_engine(config, recipe)
    check_budgets(config, recipe)
    check_judge(config, recipe)
    return recipe


def run_stages(config: PipelineConfig, recipe: Recipe, run_name: str) -> dict:
    """The pipeline's stages, holding its data directory and checkpoint root (``pipeline``)."""
    digest = prepare_data(config.data)["digest"]
    sft = discriminator_config(config, recipe)
    keyed = stages.stage_key(recipe.settings_hash(), digest, sft and config_hash(sft))
    recipe.configure(experiment=config.experiment,
                     checkpoint_dir=recipe.config.checkpoint_dir / keyed)
    tracking.configure()
    tags = {"data.version": digest, "flow": run_name, "recipe": recipe.name}
    params = {"pipeline": config.model_dump(mode="json"), "data": digest}
    with exclusive(recipe.config.checkpoint_dir, "the checkpoint directory"), \
            tracking.tracked_run(config.experiment, run_name, params=params, tags=tags) as run_id:
        start = warm_up_stage(recipe, run_id, digest)
        upstream = [digest, curation.fingerprint(start)[1]]
        judge = discriminator_stage(config, sft, recipe, start, upstream, run_id)
        trained = rl_stage(config, recipe, [*upstream, judge and judge["run_id"]], run_id,
                           slice_tags(judge), start)
        decisions = promotion_stage(config, recipe, trained, judge, digest)
        decision = decisions[recipe.registry_names()[recipe.agents[0]]]
        summary = report(run_id, trained, judge, decision)
    print(summary)
    return {"run_id": run_id, "data_version": digest, "trained": trained,
            "discriminator": judge, "decision": decision, "decisions": decisions, "table": summary}


def dataset_settings(settings, data: DataConfig) -> dict:
    """What points a stage's config at the pipeline's data: its ``world_dir`` (and its
    benchmark's) set to the world's directory or to where your files were copied."""
    evaluate = getattr(settings, "evaluate", None)
    return {"world_dir": data.dataset_dir} | (
        {"evaluate": evaluate.model_copy(update={"world_dir": data.dataset_dir})}
        if evaluate is not None else {})


def check_data(config: PipelineConfig, recipe: Recipe) -> None:
    """Refuse, before any stage runs, a recipe setting that reads what your files lack (only
    the generated world has hop chains, reasoning splits and a fact table)."""
    needs = recipe.needs_world() if config.data.files is not None else []
    if needs:
        raise ConfigError(f"{config.recipe}: data.files has no generated world, which this "
                          "recipe config reads — " + "; ".join(needs) + ".")


def check_budgets(config: PipelineConfig, recipe: Recipe) -> None:
    """Refuse, before any stage runs, token budgets that cannot hold the recipe's episodes on
    the pipeline's data: the world it will generate, or your corpus and training questions."""
    rl.check_budgets(recipe, *stages.corpus_and_questions(config.data))


def check_judge(config: PipelineConfig, recipe: Recipe) -> None:
    """Refuse, before any stage runs, a discriminator that learns from prompts carrying more or
    fewer passages than the RL step shows it (``evidence_tokens``)."""
    sft = discriminator_config(config, recipe)
    if sft is None or sft.evidence_tokens == recipe.config.evidence_tokens:
        return
    raise ConfigError(
        f"the discriminator learns from evidence_tokens = {sft.evidence_tokens} "
        f"({config.discriminator}) but {recipe.name} judges with evidence_tokens = "
        f"{recipe.config.evidence_tokens} ({config.recipe}): set both to one value")


def check_engine(config: PipelineConfig, recipe: Recipe) -> None:
    """Refuse, before any stage runs, a recipe the verl engine cannot train (``verl:`` set)."""
    if config.verl is None:
        return
    from advrag.engines.verl.launch import require_divisible, require_gpu

    summaries = getattr(getattr(recipe.config, "summary", None), "summarise", False)
    try:
        recipe.refuse_verl()
        require_divisible(recipe.config, config.verl.gpus * config.verl.nodes)
        if summaries and config.verl.retriever_url is None:
            raise ValueError("UR²'s summaries need a retrieval server started with "
                             "--summarise: set verl.retriever_url (the pipeline's own server "
                             "serves raw documents), or summary.summarise: false")
        require_gpu()
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"verl: {error}; or remove the pipeline's verl section") from None


def discriminator_config(config: PipelineConfig, recipe: Recipe) -> DiscriminatorSFTConfig | None:
    """The discriminator SFT's settings (in the pipeline's experiment, on its data); None when
    the recipe needs no discriminator SFT upstream (``Recipe.upstream``) or the pipeline names
    no SFT config."""
    if "discriminator_sft" not in recipe.upstream() or config.discriminator is None:
        return None
    sft = load_config(config.discriminator, DiscriminatorSFTConfig)
    return sft.model_copy(update={"experiment": config.experiment,
                                  "world_dir": config.data.dataset_dir})


def warm_up_stage(recipe: Recipe, parent: str, digest: str) -> str:
    """The reasoner's SFT warm-up (cached by its settings) in a nested run tagged with the data
    version; the start model."""
    if recipe.config.warmup is None:
        return recipe.config.model
    retriever, records = rl.training_data(recipe)
    with tracking.tracked_run(recipe.config.experiment, "warm-up", parent=parent,
                              tags={"data.version": digest}) as run_id:
        model_dir, history = rl.warm_up(recipe, retriever, records)
        for i, metrics in enumerate(history):
            tracking.log_metrics(run_id, {f"warmup/{k}": v for k, v in metrics.items()}, step=i)
    return str(model_dir)


def discriminator_stage(config: PipelineConfig, sft: DiscriminatorSFTConfig | None, recipe: Recipe,
                        start: str, upstream: list, parent: str) -> dict | None:
    """GAR's slice labelling + discriminator SFT on the start model; its adapter goes to the recipe."""
    if sft is None:
        return None
    from advrag.flows.discriminator_sft import discriminator_sft

    key = stages.stage_key(config_hash(sft, exclude={"experiment"}), *upstream)
    sft = sft.model_copy(update={"checkpoint_dir": sft.checkpoint_dir / key})
    result = stages.finished_stage(config.cache_dir, "discriminator", key)
    if result is None:
        result = discriminator_sft(sft, base=start, parent=parent)
        stages.record_stage(config.cache_dir, "discriminator", key, result)
    recipe.use_discriminator(result["adapter_dir"])
    return result | {"name": sft.registered_model}


def slice_tags(judge: dict | None) -> dict[str, str]:
    """The slice set's version for the RL run's tags (none without a discriminator stage)."""
    return {"data.slices.version": judge["slices_version"]} if judge and "slices_version" in judge \
        else {}


def rl_stage(config: PipelineConfig, recipe: Recipe, upstream: list, parent: str,
             tags: dict[str, str], start: str) -> dict:
    """Joint RL + benchmark of base/warm-up/trained (skipped when already done on these inputs),
    on the local engine or verl's (``verl:``); ``tags``: the versions of what it trained with
    besides the data (the slice set); ``start``: the warm-up's model."""
    engine = [config_hash(config.verl)] if config.verl else []  # the local engine's key as before
    key = stages.stage_key(recipe.settings_hash(), recipe.config.steps, *upstream, *engine)
    result = stages.finished_stage(config.cache_dir, "rl", key)
    if result is None:
        if config.verl is None:
            result = run_recipe(recipe, "pipeline", recipe.name, parent=parent, tags=tags)
        else:
            result = verl_stage(config, recipe, start, parent, tags)
        stages.record_stage(config.cache_dir, "rl", key, jsonable(result))
    return jsonable(result)


def verl_stage(config: PipelineConfig, recipe: Recipe, start: str, parent: str,
               tags: dict[str, str]) -> dict:
    """The RL stage on verl's trainer from the warm-up's model, searching the retrieval server
    ``verl.retriever_url`` or one serving the pipeline's index on 127.0.0.1 meanwhile."""
    from contextlib import nullcontext

    from advrag.flows.verl import rl_on_verl
    from advrag.retrieval.server import serving

    settings = config.verl
    server = (nullcontext(settings.retriever_url) if settings.retriever_url
              else serving(recipe.config.index_dir))
    with server as url:
        return rl_on_verl(recipe, settings.model_copy(update={"retriever_url": url}),
                          start_model=start, run_name=f"{recipe.name}-verl", parent=parent,
                          tags=tags)


def promotion_stage(config: PipelineConfig, recipe: Recipe, trained: dict, judge: dict | None,
                    digest: str) -> dict[str, dict]:
    """Every model the run registered, gated: the reasoner on its benchmark, the agents trained
    with it follow it, the SFT discriminator on its held-out slices; name → decision."""
    gate = {"data.gate": "passed", "data.gate.digest": digest}
    names, versions = recipe.registry_names(), dict(trained["versions"])
    if judge is not None:
        names, versions = names | {"judge": judge["name"]}, versions | {"judge": judge["version"]}
    for agent, name in names.items():
        promo.record_gate(name, versions[agent], gate, digest)
    reasoner = names[recipe.agents[0]]
    decisions = {reasoner: promotion_gate(reasoner, config.promotion, versions[recipe.agents[0]],
                                          evaluate=recipe.config.evaluate)}
    for agent in recipe.agents[1:]:
        decisions[names[agent]] = paired_gate(names[agent], versions[agent], reasoner,
                                              decisions[reasoner])
    if judge is not None:
        decisions[judge["name"]] = promotion_gate(judge["name"], config.promotion, judge["version"],
                                                  kind="judgments")
    return decisions


def jsonable(result: dict) -> dict:
    """The RL result with its benchmark keys ``(method, dataset)`` as ``method/dataset``."""
    return {k: {"/".join(m) if isinstance(m, tuple) else m: v for m, v in value.items()}
            if k in ("base", "warmup", "trained") else value for k, value in result.items()}


def report(run_id: str, trained: dict, judge: dict | None, decision: dict) -> str:
    """The pipeline's table (logged as ``pipeline.md``): reasoner before/after, judge, decision;
    the numbers behind it are logged as ``pipeline.json`` (what `bench_demo.py` records)."""
    from advrag.evaluation.reports import pipeline_markdown

    text = pipeline_markdown(trained, judge, decision)
    tracking.log_text(run_id, text, "pipeline.md")
    numbers = {"trained": trained, "judge": judge, "decision": decision}
    tracking.log_text(run_id, json.dumps(numbers, indent=2, default=str), "pipeline.json")
    return text


def as_config(config: PipelineConfig | str) -> PipelineConfig:
    """A config object as is, a path (what deployments pass) read and validated."""
    return config if isinstance(config, PipelineConfig) else load_config(config, PipelineConfig)
