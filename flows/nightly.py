"""Flows `nightly` (the pipeline on the night's config), `promote` and `rollback`.

A night is ``flows.pipeline.pipeline`` with ``configs/nightly.yaml``: an unchanged
night skips the stages whose inputs it has already seen and resumes a killed one;
every model it registers goes through its promotion gate. `promote` and `rollback`
act on one registered model of the night's config (``model``; default its reasoner).
"""

from __future__ import annotations

from prefect import flow

from advrag.config import PipelineConfig
from advrag.flows.pipeline import as_config, discriminator_config, pipeline, preflight
from advrag.flows.promotion import promotion_gate, registry_lock
from advrag.recipes import recipe_for
from advrag.tasks import promotion as promo
from advrag.tasks import tracking

DEFAULT_CONFIG = "configs/nightly.yaml"


@flow(name="nightly", log_prints=True)
def nightly(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Data refresh → GX gate → dvc repro → warm-up → discriminator SFT → joint RL → benchmark
    → promotion gates, as one pipeline run named ``nightly``. A config that fails the
    pipeline's checks fails at once; a failure after them is retried once (``night``)."""
    config = as_config(config)
    preflight(config)
    return night(config)


@flow(name="night", log_prints=True, retries=1, retry_delay_seconds=60)
def night(config: PipelineConfig) -> dict:
    """The night's pipeline, retried once after a minute when it fails (a lost data server, a
    crashed stage); a killed stage resumes from its checkpoints."""
    return pipeline(config, run_name="nightly")


@flow(name="promote", log_prints=True)
def promote(config: PipelineConfig | str = DEFAULT_CONFIG, version: str | None = None,
            force: bool = False, model: str | None = None) -> dict:
    """The promotion gate for version ``version`` (default: the latest) of ``model`` (default:
    the reasoner): its evidence against the champion's on the same items → aliases and tags."""
    config = as_config(config)
    name, kind = gated_model(config, model)
    if kind == "paired":
        raise ValueError(f"{name} is promoted with the reasoner it was trained with: run the "
                         f"gate of {next(iter(registered_models(config)))} instead")
    tracking.configure()
    evaluate = recipe_for(config.recipe).config.evaluate
    return promotion_gate(name, config.promotion, version, force, kind=kind, evaluate=evaluate)


@flow(name="rollback", log_prints=True)
def rollback(config: PipelineConfig | str = DEFAULT_CONFIG, model: str | None = None) -> dict:
    """Give `champion` of ``model`` (default: the reasoner) back to the version it replaced."""
    name, _ = gated_model(as_config(config), model)
    tracking.configure()
    with registry_lock(name):
        restored, demoted = promo.rollback(name)
    print(f"{name}@champion: v{demoted} → v{restored}")
    return {"name": name, "restored": restored, "demoted": demoted}


def registered_models(config: PipelineConfig) -> dict[str, str]:
    """Name → evidence kind of each model the config registers, the reasoner first:
    ``answers`` (the reasoner), ``paired`` (trained with it), ``judgments`` (the SFT judge)."""
    recipe = recipe_for(config.recipe)
    names = recipe.registry_names()
    models = {names[agent]: "paired" for agent in recipe.agents} | {names[recipe.agents[0]]: "answers"}
    sft = discriminator_config(config, recipe)
    return models | ({} if sft is None else {sft.registered_model: "judgments"})


def gated_model(config: PipelineConfig, model: str | None) -> tuple[str, str]:
    """``(name, kind)`` of ``model`` (default: the reasoner); a name the config does not
    register is an error naming the ones it does."""
    models = registered_models(config)
    name = model or next(iter(models))
    if name not in models:
        raise ValueError(f"model {name!r}: not registered by this config — choose one of "
                         f"{', '.join(models)}")
    return name, models[name]
