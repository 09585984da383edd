"""Imports point down the layers of DESIGN.md §3: pyproject.toml's import-linter contracts hold.

``.ci/lint_imports`` runs them over the package as it installs (flows/, tasks/ and
models/ as advrag.flows, advrag.tasks and advrag.models); ``make test`` runs it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLED_AS_ADVRAG = ("advrag", "flows", "tasks", "models")


@pytest.fixture(scope="module")
def lint_imports() -> subprocess.CompletedProcess:
    """One run of the contracts; lint-imports comes from this interpreter's environment."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run([str(ROOT / ".ci" / "lint_imports")], env={**os.environ, "PATH": path},
                          capture_output=True, text=True, timeout=300)


def test_no_import_points_up_a_layer(lint_imports):
    assert lint_imports.returncode == 0, lint_imports.stdout + lint_imports.stderr


def test_the_contracts_see_every_module_under_its_installed_name(lint_imports):
    """flows/, tasks/ and models/ included: a graph of advrag/ alone would skip their imports."""
    files = sum(len(list((ROOT / part).rglob("*.py"))) for part in INSTALLED_AS_ADVRAG)
    assert f"Analyzed {files} files" in lint_imports.stdout, lint_imports.stdout
