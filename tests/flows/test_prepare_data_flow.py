"""The prepare_data flow on the project's real dvc.yaml, in a throwaway git+DVC repo."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from advrag.config import DataConfig, WorldSection
from advrag.curation.gates import DataGateError
from advrag.flows.prepare_data import prepare_data
from advrag.ops import dataplane

ROOT = Path(__file__).resolve().parents[2]
SMALL = WorldSection(seed=3, n_train=6, n_dev=4, n_test=4, n_countries=3, n_cities=8,
                     n_people=16, n_organisations=6, n_rivers=3, n_mountains=3)


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project's DVC stage definitions in an empty repo."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dataplane.run_dvc(["init", "-q"], tmp_path)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "advrag", tmp_path / "advrag")  # stage deps name source files
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_bad_extra_file_fails_the_gate_and_writes_nothing_downstream(prefect_server, project):
    bad = project / "bad.jsonl"
    bad.write_text('{"id": "q1", "question": "Who?", "golden_answers": []}\n{"id": "q1"\n')
    config = DataConfig(world=SMALL, extra_files=[bad])
    with pytest.raises(DataGateError) as err:
        prepare_data(config)
    report = str(err.value)
    assert "[FAIL]" in report and "bad.jsonl" in report
    assert "malformed_json: 1 row(s)\n      lines: 2" in report
    assert "empty_golden_answers" in report and "ids:   q1" in report
    assert not (project / "data.dvc").exists()
    assert not (project / "processed").exists()


def test_good_data_is_versioned_and_indexed_then_repro_is_a_noop(prefect_server, project):
    config = DataConfig(world=SMALL)
    version = prepare_data(config)
    assert (project / "processed" / "index").is_dir()
    assert version == dataplane.data_version(project)
    assert {"data", "chunk:processed/chunks.jsonl", "index:processed/index"} <= set(version)
    out = dataplane.run_dvc(["repro", *dataplane.DATA_STAGES], project)
    assert "didn't change" in out or "up to date" in out


def write_user_files(root: Path, passages: list[str]) -> dict[str, Path]:
    """A user's corpus (not the world's shape: one paragraph a row, ids of their own) and QA."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = root / "kb.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"kb-{i:03d}", "contents": text}) + "\n"
                              for i, text in enumerate(passages)))
    qa = {"train": ("h1", "Which valve does the pump use?", "V-12"),
          "dev": ("h2", "What is valve V-12 rated for?", "60 bar"),
          "test": ("h3", "How many pumps does the plant have?", "three")}
    for split, (i, question, answer) in qa.items():
        row = {"id": i, "question": question, "golden_answers": [answer]}
        (root / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    return {"corpus": corpus} | {split: root / f"{split}.jsonl" for split in ("train", "dev", "test")}


PASSAGES = ["Pump P-3\nThe pump P-3 uses valve V-12 and runs at 40 bar.",
            "Valve V-12\nV-12 is a ball valve rated for 60 bar.",
            "Site\nThe plant has three pumps and one control room."]


def test_your_files_are_gated_copied_versioned_and_indexed_without_a_world(prefect_server,
                                                                           project):
    config = DataConfig(files=write_user_files(project / "mine", PASSAGES))
    version = prepare_data(config)
    assert not (project / "data" / "world").exists()  # nothing generated
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["data"]["corpus"] == "data/files/corpus.jsonl"
    chunks = [json.loads(x) for x in (project / "processed/chunks.jsonl").read_text().splitlines()]
    assert {c["id"].split("#")[0] for c in chunks} == {"kb-000", "kb-001", "kb-002"}
    assert (project / "processed/index").is_dir() and version == dataplane.data_version(project)

    assert prepare_data(config) == version  # unchanged files: nothing reruns
    config.files.corpus.write_text(config.files.corpus.read_text().replace("40 bar", "45 bar"))
    changed = prepare_data(config)  # an edited passage: re-gated, re-versioned, re-indexed
    assert changed["digest"] != version["digest"] and changed["data"] != version["data"]
    assert changed["embed:processed/embeddings.npy"] != version["embed:processed/embeddings.npy"]


@pytest.mark.parametrize(("dev_row", "rule"), [
    ({"id": "h2", "question": "Which valve?", "golden_answers": []}, "empty_golden_answers"),
    ({"id": "h9", "question": "which valve does the pump use", "golden_answers": ["V-12"]},
     "leaked_question"),  # train's question again: the dev score would be on what it saw
])
def test_a_bad_file_of_yours_fails_the_gate_before_anything_is_copied(prefect_server, project,
                                                                      dev_row, rule):
    files = write_user_files(project / "mine", PASSAGES)
    files["dev"].write_text(json.dumps(dev_row) + "\n")
    params = (project / "params.yaml").read_text()
    with pytest.raises(DataGateError, match=rule):
        prepare_data(DataConfig(files=files))
    assert not (project / "data").exists() and not (project / "processed").exists()
    assert (project / "params.yaml").read_text() == params
