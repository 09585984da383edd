"""Prefect tasks of the one training loop: each is one call into a recipe, or its I/O."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.datasets.records import QARecord
from advrag.recipes.base import Recipe
from advrag.tasks import tracking


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def training_data(recipe: Recipe) -> tuple:
    """The retriever (the dense index `dvc repro` built) and the recipe's training questions."""
    from advrag.retrieval.retriever import load_retriever

    return load_retriever(recipe.config.index_dir, kind="dense"), recipe.training_questions()


def check_budgets(recipe: Recipe, passages, records: list[QARecord]) -> None:
    """Refuse, before anything trains, a config whose token budgets cannot hold its own
    episodes (``Recipe.check_token_budgets``), counted in the start model's tokenizer (a check
    of seconds, run before any task: a plain call, not a tracked task)."""
    from advrag.engines.local.generation import ChatPrompting
    from advrag.engines.local.tokenize import token_counter
    from advrag.models.loading import load_tokenizer

    spec = recipe.config.model
    if spec.startswith("models:/"):
        tracking.configure()
        spec = str(tracking.download_model(spec))
    tokenizer = load_tokenizer(spec)
    recipe.check_token_budgets(token_counter(tokenizer), ChatPrompting(tokenizer).chat_prompt,
                               records, passages)


@task(cache_policy=NO_CACHE)
def warm_up(recipe: Recipe, retriever, records: list[QARecord]):
    """The recipe's SFT warm-up (cached in ``checkpoint_dir/warmup``): ``(model_dir, history)``."""
    return recipe.warm_up(retriever, records)


@task(cache_policy=NO_CACHE)
def build(recipe: Recipe, start_model: str) -> None:
    """The recipe's agents, trainers and generators, from ``start_model``."""
    recipe.build(start_model)


@task(cache_policy=NO_CACHE)
def resume(recipe: Recipe) -> int:
    """Resume from the newest checkpoint, if any (with ``ADVRAG_ARTIFACT_BUCKET`` set, the
    bucket's newer ones pulled first: a fresh machine resumes a lost one's run); the next
    step to run."""
    from advrag.engines.local.checkpoint_store import CheckpointStore

    store = CheckpointStore.from_environment()
    if store is not None:
        for name in recipe.trainers:
            store.pull(recipe.trainers.directory(recipe.config.checkpoint_dir, name))
    return recipe.resume()


@task(cache_policy=NO_CACHE)
def train_step(recipe: Recipe, retriever, step: int, records: list[QARecord]) -> dict[str, float]:
    """Update ``step`` of the recipe on its batch of ``records``; the step's metrics."""
    return recipe.step(retriever, recipe.batch(records, step))


@task(cache_policy=NO_CACHE)
def save_checkpoint(recipe: Recipe, run_id: str, next_step: int) -> None:
    """Checkpoint every agent after ``next_step`` updates and log the checkpoints (and, with
    ``ADVRAG_ARTIFACT_BUCKET`` set, mirror them to the bucket)."""
    from advrag.engines.local.checkpoint_store import CheckpointStore

    store = CheckpointStore.from_environment()
    for artifact_path, path in recipe.save(next_step, run_id).items():
        tracking.log_artifacts(run_id, path, artifact_path)
        if store is not None:
            store.push(path)


@task(cache_policy=NO_CACHE)
def log_figures(recipe: Recipe, run_id: str, history: list[dict[str, float]]) -> None:
    """The recipe's figures of the run, as artifacts."""
    for name, figure in recipe.figures(history).items():
        tracking.log_figure(run_id, figure, name)


@task(cache_policy=NO_CACHE)
def export(recipe: Recipe) -> dict[str, Path]:
    """Every trained agent as a plain transformers checkpoint; agent → directory."""
    return recipe.export()


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def register(recipe: Recipe, run_id: str, model_dirs: dict[str, Path],
             data_digest: str) -> dict[str, str]:
    """Register every agent's model with its provenance; agent → version."""
    provenance = {"data.version": data_digest, "run_id": run_id,
                  "config.hash": recipe.settings_hash(), "git.commit": tracking.git_commit()}
    agent_tag = len(recipe.agents) > 1
    return {agent: tracking.register_model_dir(
        run_id, model_dirs[agent], name, artifact_path=recipe.artifact_path(agent),
        tags={**provenance, **({"agent": agent} if agent_tag else {})})
        for agent, name in recipe.registry_names().items()}


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def tag_versions(recipe: Recipe, versions: dict[str, str], tags: dict[str, str]) -> None:
    """Write ``tags`` (e.g. the benchmark's EM/F1) on every registered version."""
    for agent, name in recipe.registry_names().items():
        tracking.set_model_version_tags(name, versions[agent], tags)


def budget_spent(started: float, minutes: float | None) -> bool:
    """True once ``minutes`` of wall clock have passed since ``started`` (never for None)."""
    return minutes is not None and time.perf_counter() - started >= 60 * minutes
