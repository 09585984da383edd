"""The design card's pipeline end to end (tiny model, small world, real DVC/GX/MLflow/Prefect).

The first run chains data → warm-up → discriminator SFT → GAR → benchmark (of the warm-up and
trained reasoner: ``benchmark_base`` is off) → promotion,
each stage a run nested under the pipeline's; the second run, on unchanged inputs,
skips the discriminator SFT and the RL stage and reaches the same decision.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
import yaml

from advrag.config import ConfigError, DataConfig, PipelineConfig
from advrag.datasets.records import read_jsonl
from advrag.flows.pipeline import pipeline
from advrag.ops import dataplane
from advrag.registry.promotion import CHAMPION
from advrag.tasks import tracking
from advrag.tasks.discriminator import slice_set_version

ROOT = Path(__file__).resolve().parents[2]
SMALL_WORLD = {"out_dir": "data/world", "seed": 3, "n_train": 8, "n_dev": 4, "n_test": 4,
               "n_countries": 3, "n_cities": 8, "n_people": 16, "n_organisations": 6,
               "n_rivers": 3, "n_mountains": 3}
pytestmark = pytest.mark.slow


@pytest.fixture()
def project(prefect_server, tmp_path, monkeypatch):
    """A throwaway git+DVC repo with the project's stages and a tmp MLflow store."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dataplane.run_dvc(["init", "-q"], tmp_path)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "advrag", tmp_path / "advrag")  # stage deps name source files
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / ".mlflow"))
    return tmp_path


def write(path: Path, settings: dict) -> Path:
    path.write_text(yaml.safe_dump(settings))
    return path


def tiny_pipeline(project: Path, policy: Path) -> PipelineConfig:
    common = {"model": str(policy), "lora": {"r": 4, "alpha": 8}, "cpu_bf16": False}
    recipe = write(project / "gar.yaml", common | {
        "recipe": "gar", "steps": 1, "questions_per_step": 2, "max_turns": 1, "max_new_tokens": 8,
        "max_judge_tokens": 12, "max_slice_tokens": 16, "checkpoint_dir": str(project / "ckpt"),
        "group_size": 2, "optim": {"lr": 1e-2, "micro_batch_size": 2, "max_seq_len": 2048},
        "warmup": {"demonstrations": 4, "sft": {"lr": 1e-3, "batch_size": 2, "epochs": 1}},
        "registered_reasoner": "tiny-reasoner", "registered_discriminator": "tiny-judge",
        "benchmark_base": False, "evaluate": {"methods": ["search_r1"], "dtype": "float32", "limit": 4, "batch_size": 4,
                     "max_turns": 1, "max_new_tokens": 8}})
    judge = write(project / "discriminator.yaml", common | {
        "sft": {"lr": 1e-2, "epochs": 1, "batch_size": 8, "micro_batch_size": 8,
                "max_seq_len": 2048},
        "max_new_tokens": 12, "questions": 8, "out_dir": str(project / "slices"),
        "checkpoint_dir": str(project / "judge"), "registered_model": "tiny-discriminator"})
    return PipelineConfig(
        data={"world": SMALL_WORLD},
        recipe=recipe, discriminator=judge, promotion={"method": "search_r1", "n_boot": 200},
        experiment="pipeline-test", cache_dir=project / "stages")


def test_the_pipeline_runs_each_stage_once_and_promotes(project, tiny_policy_dir):
    config = tiny_pipeline(project, tiny_policy_dir)
    first = pipeline(config)

    assert first["decision"]["alias"] == CHAMPION
    assert set(first["trained"]["versions"]) == {"reasoner", "discriminator"}
    assert {"warmup", "trained"} <= set(first["trained"]) and "base" not in first["trained"]
    experiment = mlflow.get_experiment_by_name("pipeline-test").experiment_id
    children = mlflow.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{first['run_id']}'",
                                  output_format="list")
    assert {run.info.run_name for run in children} == {"warm-up", "discriminator-sft", "gar"}
    assert all(run.data.tags["data.version"] == first["data_version"] for run in children)
    slices = {run.info.run_name: run.data.tags.get("data.slices.version") for run in children}
    assert slices["gar"] == slices["discriminator-sft"] == first["discriminator"]["slices_version"]
    assert len(slices["gar"]) == 64  # the slice file's SHA-256
    assert "pipeline.md" in {a.path for a in mlflow.MlflowClient().list_artifacts(first["run_id"])}
    rewards = first["trained"]["rewards"]  # the one GAR update's terms, printed under the table
    assert list(rewards) == ["R_m", "R_s", "R_d", "R_a"] and all(len(v) == 1 for v in rewards.values())
    assert "Joint RL rewards, 1 update: R_m " in first["table"]
    changed = first["trained"]["changed_answers"]["search_r1/world"]  # read from both runs' rows
    predictions = [{r["id"]: r["prediction"] for r in tracking.read_table(
        first["trained"]["benchmark_runs"][stage], "predictions/world/search_r1.json")}
        for stage in ("warmup", "trained")]
    assert changed == sum(predictions[0][i] != p for i, p in predictions[1].items())
    assert f"RL (1 update) changed {changed} of the 4 greedy answers" in first["table"]
    moved = first["trained"]["weight_change"]  # the trained reasoner against the warm-up's weights
    assert 0 <= moved < 0.1 and f"weights by {100 * moved:.2g} % of the warm-up's" in first["table"]
    runs = first["trained"]["benchmark_runs"]  # each benchmark's per-question predictions
    assert set(runs) == {"warmup", "trained"}
    for run_id in runs.values():
        rows = tracking.read_table(run_id, "predictions/world/search_r1.json")
        assert len(rows) == 4 and {"id", "em", "f1", "n_searches"} <= set(rows[0])  # limit 4

    second = pipeline(config)
    assert second["discriminator"]["run_id"] == first["discriminator"]["run_id"]  # skipped
    assert second["trained"]["run_id"] == first["trained"]["run_id"]  # skipped
    assert second["decision"]["version"] == first["decision"]["version"]


def test_a_judge_trained_on_other_evidence_than_it_judges_with_is_refused_first(
        project, tiny_policy_dir):
    config = tiny_pipeline(project, tiny_policy_dir)
    judge = yaml.safe_load(config.discriminator.read_text()) | {"evidence_tokens": 256}
    write(config.discriminator, judge)
    with pytest.raises(ConfigError, match=r"the discriminator learns from evidence_tokens = 256 "
                                          r".* but gar judges with evidence_tokens = 768 .*: set "
                                          r"both to one value"):
        pipeline(config)
    assert not (project / "data" / "world").exists()  # nothing was built


MANUAL = [  # a user's corpus, unlike the world's: manual paragraphs, ids of their own, no titles
    ("m-pump", "The feed pump P-3 draws from tank T-1 through the ball valve V-12."),
    ("m-valve", "Valve V-12 is closed before maintenance; its rated pressure is 60 bar."),
    ("m-tank", "Tank T-1 holds 4000 litres of cooling water and is refilled every Monday."),
    ("m-room", "The control room is staffed by two operators on every shift."),
    ("m-alarm", "A low-level alarm in tank T-1 stops the feed pump P-3 at once."),
    ("m-filter", "The strainer S-2 in front of pump P-3 is cleaned every Friday."),
]
QUESTIONS = [("Which valve does the feed pump P-3 draw through?", "V-12"),
             ("What is the rated pressure of valve V-12?", "60 bar"),
             ("How many litres does tank T-1 hold?", "4000 litres"),
             ("How many operators staff the control room?", "two"),
             ("Which alarm stops the feed pump P-3?", "low-level alarm"),
             ("When is the strainer S-2 cleaned?", "every Friday")]
HELDOUT = [("Through which valve does pump P-3 draw its feed?", "V-12"),  # dev, then test
           ("What pressure is valve V-12 rated for?", "60 bar"),
           ("What volume of cooling water does tank T-1 hold?", "4000 litres"),
           ("How many operators are on each shift in the control room?", "two"),
           ("What stops pump P-3 when tank T-1 runs low?", "low-level alarm"),
           ("On which day is strainer S-2 cleaned?", "every Friday")]


def write_manual(root: Path) -> dict[str, Path]:
    """The corpus as JSON lines; train as JSON lines, dev as a JSON array, test as parquet."""
    import json

    import pandas as pd

    root.mkdir()
    (root / "manual.jsonl").write_text("".join(json.dumps({"id": i, "contents": text}) + "\n"
                                               for i, text in MANUAL))
    qa = [{"id": f"hq{n}", "question": q, "golden_answers": [a]}
          for n, (q, a) in enumerate(QUESTIONS + HELDOUT)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa[:6]))
    (root / "dev.json").write_text(json.dumps(qa[6:9]))
    pd.DataFrame(qa[9:]).to_parquet(root / "test.parquet")
    return {"corpus": root / "manual.jsonl", "train": root / "train.jsonl",
            "dev": root / "dev.json", "test": root / "test.parquet"}


def test_the_pipeline_runs_on_your_own_files_without_a_world(project, tiny_policy_dir):
    """Gate → DVC-versioned index of your corpus → warm-up from your questions → discriminator
    SFT on slices labelled with your golden answers → GAR → benchmark on your test file →
    promotion."""
    tiny = tiny_pipeline(project, tiny_policy_dir)
    result = pipeline(tiny.model_copy(update={"data": DataConfig(files=write_manual(
        project / "mine"))}))

    assert not (project / "data" / "world").exists()
    assert sorted(p.name for p in (project / "data" / "files").iterdir()) == [
        "corpus.jsonl", "dev.jsonl", "test.jsonl", "train.jsonl"]
    assert yaml.safe_load((project / "params.yaml").read_text())["data"]["corpus"] == \
        "data/files/corpus.jsonl"
    chunks = (project / "processed" / "chunks.jsonl").read_text()
    assert all(f'"{doc_id}' in chunks for doc_id, _ in MANUAL)
    assert result["trained"]["warmup"]["search_r1/world"]["n"] == 3  # your test file's rows
    assert result["decision"]["alias"] == CHAMPION
    slices = read_jsonl(project / "slices" / "slices.jsonl")
    assert {r["question_id"] for r in slices} <= {f"hq{n}" for n in range(len(QUESTIONS))}
    for split in ("train", "heldout"):  # each split balanced 1:1, both labels present
        labels = [r["sound"] for r in slices if r["split"] == split]
        assert labels.count(True) == labels.count(False) > 0, split
    assert result["discriminator"]["slices_version"] == slice_set_version(
        project / "slices" / "slices.jsonl")
    run = mlflow.get_run(result["run_id"])
    assert run.data.tags["data.version"] == result["data_version"]
