"""The DVC data plane for real: add raw data, reproduce a stage, no-op, versions."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advrag.ops import dataplane


@pytest.fixture()
def repo(tmp_path) -> Path:
    """A git + DVC repo with raw data and one stage that upper-cases it."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dataplane.run_dvc(["init", "-q"], tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("abc\n")
    (tmp_path / "dvc.yaml").write_text(textwrap.dedent(f"""\
        stages:
          upper:
            cmd: {sys.executable} -c "import pathlib; pathlib.Path('out').mkdir(exist_ok=True); pathlib.Path('out/up.txt').write_text(pathlib.Path('data/in.txt').read_text().upper())"
            deps: [data/in.txt]
            outs: [out]
        """))
    return tmp_path


def test_add_repro_noop_and_version_change(repo):
    md5 = dataplane.version_raw_data(Path("data"), repo)
    dataplane.reproduce(repo)
    assert (repo / "out" / "up.txt").read_text() == "ABC\n"
    first = dataplane.data_version(repo)
    assert first["data"] == md5 and "upper:out" in first

    (repo / "out" / "up.txt").touch()  # an mtime change is not a content change
    out = dataplane.run_dvc(["repro"], repo)
    assert "didn't change" in out or "up to date" in out
    assert dataplane.data_version(repo) == first

    (repo / "data" / "in.txt").write_text("xyz\n")
    dataplane.version_raw_data(Path("data"), repo)
    dataplane.reproduce(repo)
    second = dataplane.data_version(repo)
    assert (repo / "out" / "up.txt").read_text() == "XYZ\n"
    assert second["digest"] != first["digest"] and second["data"] != first["data"]


def test_failed_dvc_command_names_the_command(repo):
    with pytest.raises(dataplane.DvcError, match="dvc repro nosuchstage"):
        dataplane.run_dvc(["repro", "nosuchstage"], repo)


def test_version_ignores_the_dvc_directory(tmp_path):
    (tmp_path / ".dvc").mkdir()
    assert set(dataplane.data_version(tmp_path)) == {"digest"}
