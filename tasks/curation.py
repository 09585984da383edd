"""Prefect tasks of UR²'s curation in front of a recipe: fingerprint the policy, score with the
recipe's agent, write + gate, log."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.datasets.records import QARecord
from advrag.recipes.base import Recipe
from advrag.recipes.curated import CurateSection
from advrag.tasks import tracking


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def curation_data(recipe: Recipe) -> tuple:
    """The retriever, the recipe's training questions to score, and the held-out (dev + test)
    ones."""
    from advrag.datasets.loaders import load_qa
    from advrag.retrieval.retriever import load_retriever

    config = recipe.config
    records = recipe.training_questions()[:config.curate.questions]
    heldout = [r for split in ("dev", "test") for r in load_qa(config.world_dir / f"{split}.jsonl")]
    return load_retriever(config.index_dir, kind="dense"), records, heldout


@task(cache_policy=NO_CACHE)
def fingerprint(policy: str) -> tuple[str, str]:
    """``(model directory, sha256 of its weights)`` of the policy spec."""
    from advrag.curation.curate import policy_fingerprint
    from advrag.models.loading import resolve_model_dir

    model_dir = resolve_model_dir(policy)
    return model_dir, policy_fingerprint(model_dir)


@task(cache_policy=NO_CACHE)
def score_questions(recipe: Recipe, model_dir: str, policy_hash: str,
                    records: list[QARecord], retriever) -> list:
    """k attempts of the recipe's agent per question with the policy (cached per policy, k and
    the agent's settings)."""
    from advrag.curation.curate import ScoreCache, cache_path, estimate_scores
    from advrag.engines.generators import make_generator
    from advrag.engines.local.generation import pick_dtype
    from advrag.models.loading import load_policy

    config, section = recipe.config, recipe.config.curate
    settings = {"metric": section.metric, **recipe.curation_settings()}
    policy = load_policy(model_dir, dtype=pick_dtype("auto"))
    generator = make_generator(config.rollout_backend, policy.model, policy.tokenizer, model_dir,
                               temperature=config.temperature, batch_size=64,
                               compile_rollout=config.compile_rollout,
                               rollouts=len(records) * section.k)
    cache = ScoreCache(cache_path(section.cache_dir, policy_hash, section.k, settings))
    return estimate_scores(records, recipe.curation_agent(generator, retriever), cache,
                           k=section.k, metric=section.metric,
                           batch_questions=section.batch_questions)


@task(cache_policy=NO_CACHE)
def write_and_gate(section: CurateSection, tables: dict, summary: dict,
                   heldout: list[QARecord]) -> dict[str, Path]:
    """Write the curated files; they replace the old ones only if the GX gate passes."""
    from advrag.curation.curate import write_curated
    from advrag.curation.difficulty import level_counts
    from advrag.curation.gates import DataGateError, validate_curated_file

    n = len(tables["curated"])
    counts = level_counts({lv: summary["levels"][lv] for lv in section.ratio}, n, section.ratio)
    shares = {lv: c / n for lv, c in counts.items()} if n else {}

    def gate(curated: Path) -> None:
        report = validate_curated_file(curated, heldout=[r.to_json() for r in heldout],
                                       expected_shares=shares, tolerance=section.ratio_tolerance)
        if n and not report.ok:
            raise DataGateError(report.render())

    return write_curated(section.out_dir, tables, summary, check=gate)


@task(cache_policy=NO_CACHE)
def log_curation(run_id: str, section: CurateSection, scores: list[float],
                 summary: dict) -> None:
    """Counts per level, the histogram plot and the curated files, to the run."""
    from advrag.evaluation.reports import difficulty_histogram

    tracking.log_metrics(run_id, {f"curate/{lv}": n for lv, n in summary["levels"].items()}
                         | {"curate/sample": summary["sample"], "curate/mean_score":
                            sum(scores) / max(len(scores), 1)})
    tracking.log_figure(run_id, difficulty_histogram(scores, section.thresholds,
                                                     summary["levels"]), "curate/difficulty.png")
    tracking.log_artifacts(run_id, section.out_dir, "curate")
