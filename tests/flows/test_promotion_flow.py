"""The promotion gate end to end: a champion benchmarked on other questions is downloaded
through ``models:/`` and benchmarked again on the candidate's, by the real benchmark flow,
before the two are compared (the unit tests stop short of that download)."""

from __future__ import annotations

import mlflow
import pytest

from advrag.config import BenchmarkConfig, PromotionSection
from advrag.flows.benchmark import benchmark
from advrag.flows.promotion import promotion_gate
from advrag.registry.promotion import CHALLENGER, CHAMPION
from advrag.tasks import promotion as promo
from advrag.tasks import tracking


def other_questions_run() -> str:
    """A benchmark-shaped run on questions the candidate was never asked."""
    rows = [{"id": f"elsewhere-{i}", "question": f"Where is place {i}?",
             "golden_answers": [f"a{i}"], "em": 1.0} for i in range(6)]
    with tracking.tracked_run("bench-elsewhere", "b") as run_id:
        tracking.log_table(run_id, rows, "predictions/world/search_r1.json")
    return run_id


def predictions(run_id: str) -> dict[str, str]:
    """Question id → the answer the run's search_r1 method gave."""
    uri = f"{mlflow.get_run(run_id).info.artifact_uri}/predictions/world/search_r1.json"
    table = mlflow.artifacts.load_dict(uri)
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    return {row["id"]: row["prediction"] for row in rows}


def register(name: str, model_dir, bench_run_id: str) -> str:
    """A registered version with the tags the pipeline writes for a gated, benchmarked model."""
    with tracking.tracked_run("train", "t") as run_id:
        version = tracking.register_model_dir(run_id, model_dir, name)
    tracking.set_model_version_tags(name, version, {
        "data.version": "d1", "data.gate": "passed", "data.gate.version": "d1",
        "bench.run_id": bench_run_id})
    return version


@pytest.mark.slow
def test_a_champion_on_other_questions_is_benchmarked_again_through_models_uri(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    tracking.configure()
    name, settings = "reasoner-e2e", PromotionSection(n_boot=200)
    champion = register(name, tiny_policy_dir, other_questions_run())
    assert promotion_gate(name, settings, champion)["alias"] == CHAMPION  # the first one

    evaluate = BenchmarkConfig(
        model=str(tiny_policy_dir), dtype="float32", world_dir=small_world_dir,
        index_dir=small_index_dir, methods=["search_r1"], limit=4, batch_size=2, max_turns=2,
        max_new_tokens=12, experiment="promotion-e2e")
    candidate_run = benchmark(evaluate, run_name="candidate")["run_id"]
    candidate = register(name, tiny_policy_dir, candidate_run)
    decision = promotion_gate(name, settings, candidate, evaluate=evaluate)

    runs = mlflow.search_runs(experiment_names=["promotion-e2e"], output_format="list",
                              filter_string=f"tags.mlflow.runName = 'champion-v{champion}'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["model"] == f"models:/{name}/{champion}"
    rebenchmarked = promo.per_question_em(runs[0].info.run_id, "search_r1")
    asked = promo.per_question_em(candidate_run, "search_r1")
    # the same weights, greedy, on the same four questions: the same answers, word for word
    assert set(rebenchmarked) == set(asked) and len(asked) == 4
    assert rebenchmarked == asked
    assert predictions(runs[0].info.run_id) == predictions(candidate_run)
    # equal evidence never takes the alias: the candidate stays challenger, the champion stays
    assert decision["alias"] == CHALLENGER and decision["version"] == candidate
    assert tracking.alias_version(name, CHAMPION) == champion
