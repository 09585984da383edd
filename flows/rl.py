"""The one loop every training recipe runs, and the flow `rl` that runs a recipe by config.

warm start → (update → log → print → checkpoint)* within the budget → figures →
export → register → benchmark base/warm-up/trained. Recipes (``advrag.recipes``)
supply only what is their own.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow

from advrag.common import console
from advrag.common.fileio import remove_leftovers
from advrag.common.locks import exclusive, shared
from advrag.config import BenchmarkConfig, RLRunConfig
from advrag.datasets.records import QARecord
from advrag.flows.benchmark import benchmark
from advrag.models.loading import resolve_model_dir, weight_change
from advrag.recipes import recipe_for, recipe_named
from advrag.recipes.base import Recipe
from advrag.tasks import data, rl, tracking


@flow(name="rl", log_prints=True)
def rl_flow(config: RLRunConfig | str, run_name: str | None = None,
            overrides: dict | None = None) -> dict:
    """Train the recipe a config names (``recipe:``: grpo, arr, ur2, gar): a config file (with
    ``overrides`` laid over it) or a recipe's config object."""
    if isinstance(config, RLRunConfig):
        recipe = recipe_named(config.recipe)(config)
    else:
        recipe = recipe_for(config, overrides)
    return run_recipe(recipe, "rl", run_name or recipe.name)


def run_recipe(recipe: Recipe, flow_name: str, run_name: str, parent: str | None = None,
               tags: dict[str, str] | None = None) -> dict:
    """Run ``recipe`` end to end in one MLflow run (nested under ``parent`` if given, with
    ``tags`` besides its own); returns the run, models and benchmarks."""
    config = recipe.config
    tracking.configure()
    version = data.data_version()
    params = {"config": config.model_dump(mode="json"), "data": version}
    tags = {"data.version": version["digest"], "flow": flow_name, "recipe": recipe.name,
            "model": config.model, **(tags or {})}
    retriever, records = rl.training_data(recipe)
    rl.check_budgets(recipe, retriever.passages, records)
    with shared(Path(config.world_dir).parent, "the data directory"), \
            exclusive(config.checkpoint_dir, "the checkpoint directory"), \
            tracking.tracked_run(config.experiment, run_name, params=params, tags=tags,
                                 parent=parent) as run_id:
        for folder in (config.checkpoint_dir, *(config.checkpoint_dir / a for a in recipe.agents)):
            remove_leftovers(folder)  # a killed save's temporary copies
        start_model = warm_start(recipe, run_id, retriever, records)
        curate_with(recipe, start_model, run_id)
        rl.build(recipe, start_model)
        started = time.perf_counter()
        first_step = rl.resume(recipe)
        earlier = carried_updates(recipe, run_id, first_step)
        history = run_updates(recipe, run_id, retriever, records, first_step)
        rl.log_figures(recipe, run_id, earlier + history)
        model_dirs = rl.export(recipe)
        versions = rl.register(recipe, run_id, model_dirs, version["digest"])
    primary = recipe.agents[0]
    results = {"run_id": run_id, "model_dirs": {a: str(p) for a, p in model_dirs.items()},
               "versions": versions, "model_dir": str(model_dirs[primary]),
               "version": versions[primary], "steps_run": len(history), "resumed_at": first_step,
               "train_s": time.perf_counter() - started,
               "rewards": reward_curves(recipe, earlier + history)}
    if config.evaluate is not None:
        results |= benchmark_stages(recipe, run_name, start_model, model_dirs, versions)
    return results


def reward_curves(recipe: Recipe, history: list[dict]) -> dict[str, list[float]]:
    """The recipe's reward terms (``Recipe.reward_terms``), one value per update in ``history``."""
    return {name: [h[key] for h in history if key in h]
            for name, key in recipe.reward_terms.items()}


def carried_updates(recipe: Recipe, run_id: str, first_step: int) -> list[dict]:
    """The updates before ``first_step``, copied into this run from the run whose checkpoint it
    resumed (``tracking.carry_updates``), so its curves start at update 1; where they cannot
    be, it says so and the curves start at the resume."""
    if first_step == 0:
        return []
    why = "the checkpoint names no run (it predates the field)"
    if recipe.resumed_from_run is not None:
        try:
            return tracking.carry_updates(recipe.resumed_from_run, run_id, first_step)
        except LookupError as missing:
            why = str(missing)
    print(f"resumed at update {first_step + 1}; the earlier updates' metrics are not copied "
          f"into this run: {why}. Its curves start at update {first_step + 1}.", flush=True)
    return []


def warm_start(recipe: Recipe, run_id: str, retriever, records) -> str:
    """The model RL starts from: the warm-up's (its SFT curve logged), or the config's."""
    if recipe.config.warmup is None:
        return recipe.config.model
    warm_dir, warm_history = rl.warm_up(recipe, retriever, records)
    for i, metrics in enumerate(warm_history):
        tracking.log_metrics(run_id, {f"warmup/{k}": v for k, v in metrics.items()}, step=i)
    return str(warm_dir)


def curate_with(recipe: Recipe, policy: str, run_id: str) -> None:
    """UR²'s curation with the start policy, as a subflow nested under the training run.

    Only for recipes whose ``upstream`` names curation (a ``curate`` section: ``recipe: ur2``'s,
    or ``gar``'s); the recipe is handed the curated sample and the stage-1 questions.
    """
    if "curation" not in recipe.upstream():
        return
    from advrag.datasets.records import read_jsonl
    from advrag.flows.curate import curate_flow

    paths = curate_flow(recipe, policy=policy, parent=run_id)["paths"]
    curated, stage1 = ([leveled(row) for row in read_jsonl(paths[name])]
                       for name in ("curated", "stage1"))
    recipe.use_curation(curated, stage1)


def leveled(row: dict) -> QARecord:
    """A curated row as a QA record whose metadata carries its difficulty level."""
    record = QARecord.from_json(row)
    record.metadata["level"] = row["level"]
    return record


def run_updates(recipe: Recipe, run_id: str, retriever, records, first_step: int) -> list[dict]:
    """(update → log → print → checkpoint)* from ``first_step`` to ``steps``.

    A checkpoint is taken every ``checkpoint_every`` updates and after the last
    one: ``steps``, or the update that spends ``max_train_minutes``.
    """
    config, history, started = recipe.config, [], time.perf_counter()
    bar = console.progress(f"{run_label(recipe)} RL", config.steps, "updates", initial=first_step)
    for step in range(first_step, config.steps):
        metrics = rl.train_step(recipe, retriever, step, records)
        tracking.log_metrics(run_id, metrics, step=step)
        history.append({"step": step, **metrics})
        print(f"update {step + 1}/{config.steps}: {recipe.describe(metrics)}")
        bar.set_postfix_str(recipe.describe(metrics), refresh=False)
        bar.update()
        last = step + 1 == config.steps or rl.budget_spent(started, config.max_train_minutes)
        if (step + 1) % config.checkpoint_every == 0 or last:
            rl.save_checkpoint(recipe, run_id, step + 1)
        if last:
            break
    bar.close()
    return history


def run_label(recipe: Recipe) -> str:
    """The recipe's name for its progress bar, ``+rex`` when it composes REX-RAG's probes (a
    ``grpo`` run with ``exploration: {kind: rex}`` is REX-RAG's method, not plain GRPO)."""
    probing = getattr(recipe.config, "exploration", None) is not None
    return f"{recipe.name}+rex" if probing else recipe.name


def benchmark_stages(recipe: Recipe, run_name: str, start_model: str, model_dirs: dict,
                     versions: dict[str, str]) -> dict:
    """Benchmark the base (unless ``benchmark_base`` is off), warmed-up and trained models; tag
    the versions with the trained one's. Stage → summaries, and ``benchmark_runs``: stage → the
    benchmark's MLflow run (its per-question predictions)."""
    stages = recipe.benchmark_models(start_model, model_dirs)
    if start_model == recipe.config.model:
        del stages["warmup"]
    if not recipe.config.benchmark_base:
        del stages["base"]
    results, evaluation, runs = {}, {}, {}
    for stage, fields in stages.items():
        settings: BenchmarkConfig = recipe.config.evaluate.model_copy(update=fields)
        evaluation = benchmark(settings, run_name=f"{run_name}-{stage}")
        results[stage], runs[stage] = evaluation["results"], evaluation["run_id"]
    rl.tag_versions(recipe, versions, benchmark_tags(evaluation))
    if not {"warmup", "trained"} <= set(runs):
        return results | {"benchmark_runs": runs, "changed_answers": {}}
    changed = {"/".join(key): changed_answers(runs["warmup"], runs["trained"], key)
               for key in results["trained"]}
    moved = weight_change(resolve_model_dir(start_model), model_dirs[recipe.agents[0]])
    return results | {"benchmark_runs": runs, "changed_answers": changed, "weight_change": moved}


def changed_answers(before_run: str, after_run: str, key: tuple[str, str]) -> int:
    """How many questions of benchmark ``key`` (method, dataset) the two runs answer
    differently: what RL changed in the greedy answers, even where EM did not move."""
    method, dataset = key
    name = f"predictions/{dataset}/{method}.json"
    before = {row["id"]: row["prediction"] for row in tracking.read_table(before_run, name)}
    after = {row["id"]: row["prediction"] for row in tracking.read_table(after_run, name)}
    return sum(before.get(i) != answer for i, answer in after.items())


def benchmark_tags(evaluation: dict) -> dict[str, str]:
    """Registry tags of a benchmark: its run id and EM/F1 per (dataset, method)."""
    tags = {"bench.run_id": evaluation["run_id"]}
    for (method, dataset), summary in evaluation["results"].items():
        for key in ("em", "f1", "n"):
            tags[f"bench.{dataset}.{method}.{key}"] = f"{summary[key]:.4f}"
    return tags
