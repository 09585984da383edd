"""Flow `curate`: UR²'s difficulty buckets of a recipe's training questions, with the current policy.

fingerprint the policy → k attempts of the recipe's agent per question (cached, resumable) →
levels and the 7:2:1 sample → write + GX gate (atomic) → MLflow (counts, histogram, files).
Runs on its own (`advrag curate`, the DVC stage ``curate``) and as a subflow of the training of
a recipe with a ``curate`` section (UR²'s, or GAR's composed with it), nested under its run.
"""

from __future__ import annotations

from prefect import flow

from advrag.recipes.base import Recipe
from advrag.tasks import curation, tracking


@flow(name="curate", log_prints=True)
def curate_flow(recipe: Recipe, policy: str | None = None, parent: str | None = None) -> dict:
    """Curate ``recipe``'s training questions with ``policy`` (default: its config's model)."""
    from advrag.curation.curate import curate, level_histogram

    if parent is None:  # on its own: the store of this environment (nested: the parent's)
        tracking.configure()
    config = recipe.config
    section = config.curate
    policy = policy or config.model
    retriever, records, heldout = curation.curation_data(recipe)
    model_dir, policy_hash = curation.fingerprint(policy)
    experiment = config.experiment if parent else section.experiment
    params = {"curate": section.model_dump(mode="json"), "policy": policy,
              "policy_hash": policy_hash, "questions": len(records)}
    with tracking.tracked_run(experiment, "curate", params=params, parent=parent,
                              tags={"policy.hash": policy_hash, "flow": "curate"}) as run_id:
        scores = curation.score_questions(recipe, model_dir, policy_hash, records, retriever)
        tables = curate(records, scores, n=section.sample_size, policy=policy_hash, k=section.k,
                        thresholds=section.thresholds, ratio=section.ratio, seed=config.optim.seed)
        summary = {"policy": policy, "policy_hash": policy_hash, "k": section.k,
                   "metric": section.metric, "levels": level_histogram(tables["scores"]),
                   "sample": len(tables["curated"]), "stage1": len(tables["stage1"])}
        paths = curation.write_and_gate(section, tables, summary, heldout)
        curation.log_curation(run_id, section, [s.score for s in scores], summary)
    print(f"curated {len(records)} questions with k={section.k}: {summary['levels']}, "
          f"sample {summary['sample']}, stage-1 pool {summary['stage1']} → {section.out_dir}")
    return {"run_id": run_id, "paths": {k: str(v) for k, v in paths.items()}, **summary}
