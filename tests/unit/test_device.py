"""Device choice: GPU when torch sees one, ADVRAG_DEVICE overrides, bad names are refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from test_cli_config import PROBE

from advrag.common.device import DEVICE_ENV, pick_device


def test_auto_is_the_gpu_when_torch_sees_one_else_the_cpu(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")


def test_environment_overrides_auto_but_not_an_explicit_choice(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert pick_device("auto") == "cpu"
    monkeypatch.setenv(DEVICE_ENV, "no-such-device")
    assert pick_device("cpu") == "cpu"


def test_a_typo_names_the_setting_and_the_choices(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cdua")
    with pytest.raises(ValueError, match=r"'cdua' \(from \$ADVRAG_DEVICE\).*'cpu', 'cuda'"):
        pick_device()


def test_a_typo_in_the_variable_stops_a_command_before_it_imports_torch(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("steps: 1\n")
    result = subprocess.run([sys.executable, "-c", PROBE, "train", "--config", str(config)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=os.environ | {DEVICE_ENV: "gpu"})
    assert result.returncode == 2
    assert result.stderr == ("error: unknown device 'gpu' (from $ADVRAG_DEVICE): use 'auto', "
                             "'cpu', 'cuda' or 'cuda:N' (this project runs on CPUs and CUDA "
                             "GPUs).\n")
    assert result.stdout.strip() == "[]"  # neither Prefect, torch nor MLflow was imported


def test_devices_the_project_does_not_run_on_are_refused(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    with pytest.raises(ValueError, match=r"^unknown device 'meta': .*CPUs and CUDA GPUs"):
        pick_device("meta")


def test_a_missing_gpu_is_refused_with_the_fix(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no CUDA GPU.*use 'cpu' or 'auto'"):
        pick_device("cuda:0")
