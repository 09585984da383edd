"""The wheel installs one top-level package, ``advrag`` (flows/, tasks/, models/ under it)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built without network from a copy of this checkout (the build
    writes build/ and *.egg-info beside the sources)."""
    source, out = tmp_path_factory.mktemp("src") / "advrag", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".cache", ".mlflow", ".prefect", "data", "processed", "build",
        "*.egg-info", "__pycache__", "test-artifacts"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(source)], check=True)
    (built,) = out.glob("advrag-*.whl")
    return built


def test_the_wheel_holds_only_the_advrag_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"advrag"}
    for module in ("advrag/flows/rl.py", "advrag/tasks/rl.py", "advrag/models/loading.py",
                   "advrag/recipes/base.py", "advrag/config/flows.py"):
        assert module in names
    packaged = {str(Path(n).parent) for n in names if n.endswith("/__init__.py")}
    on_disk = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "advrag").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    assert on_disk <= packaged  # a new subpackage missing from pyproject's list fails here


def test_a_fresh_venv_installs_the_wheel_and_runs_the_cli(wheel, tmp_path):
    """``pip install`` into a new venv (dependencies seen through this venv's site-packages)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True)
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    (Path(purelib.stdout.strip()) / "deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    where = subprocess.run([str(python), "-c", "import advrag.flows, advrag.tasks, advrag.models;"
                            "print(advrag.flows.__file__)"], cwd=tmp_path, env=env, check=True,
                           capture_output=True, text=True).stdout
    assert where.startswith(str(venv))  # the installed copy, not this checkout
    help_text = subprocess.run([str(venv / "bin" / "advrag"), "--help"], cwd=tmp_path, env=env,
                               check=True, capture_output=True, text=True).stdout
    assert "adversarial-rl" in help_text and "benchmark" in help_text
    generic = subprocess.run([str(python), "-c", "import flows"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert generic.returncode != 0 and "No module named 'flows'" in generic.stderr
