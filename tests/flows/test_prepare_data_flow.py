"""The prepare_data flow on the project's real dvc.yaml, in a throwaway git+DVC repo."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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
