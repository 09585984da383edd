"""The CLI on configs: a bad file exits 2 with one message and no traceback; `config show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from advrag.cli import app
from advrag.config import AdversarialRLConfig, NightlyConfig, config_hash, load_config

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m advrag.cli ARGS`` in a subprocess (what a user's shell runs)."""
    return subprocess.run([sys.executable, "-m", "advrag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["train", "adversarial-rl", "nightly", "demo", "rl"])
def test_a_typo_exits_2_with_one_message_before_anything_runs(tmp_path, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text({"adversarial-rl": "recipe: arr\noptim: {lr_rate: 1.0e-5}\n",
                    "rl": "recipe: arr\noptim: {lr_rate: 1.0e-5}\n",
                    "nightly": "train:\n  optim: {lr_rate: 1.0e-5}\n",
                    "demo": "benchmark: {lr_rate: 1.0e-5}\n"}.get(command,
                                                               "optim: {lr_rate: 1.0e-5}\n"))
    result = cli(command, "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {bad}: invalid ")
    assert "lr_rate" in result.stderr and "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / ".mlflow").exists()  # nothing started, nothing written


def test_missing_file_and_bad_value_name_the_problem(tmp_path):
    missing = cli("train", "--config", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    zero = tmp_path / "zero.yaml"
    zero.write_text("topk: 0\n")
    result = CliRunner().invoke(app, ["train", "--config", str(zero)])
    assert result.exit_code == 2
    assert "topk: Input should be greater than or equal to 1 (got 0)" in result.output


@pytest.mark.parametrize(("path", "model"), [("configs/arr-no-adv.yaml", AdversarialRLConfig),
                                             ("configs/nightly.yaml", NightlyConfig)])
def test_config_show_prints_the_resolved_config_and_its_hash(path, model):
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / path)])
    assert result.exit_code == 0, result.output
    header, body = result.output.split("\n", 1)
    loaded = load_config(ROOT / path, model)
    assert header.endswith(f"as {model.__name__}; hash {config_hash(loaded)}")
    assert model.model_validate(yaml.safe_load(body)) == loaded  # every default, round-trips
    if model is AdversarialRLConfig:
        assert yaml.safe_load(body)["adversarial_reward"] is False  # the ablation over arr.yaml


def test_config_show_refuses_an_unknown_kind(tmp_path):
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / "configs/train.yaml"),
                                      "--kind", "ur3"])
    assert result.exit_code == 2 and "unknown --kind 'ur3'" in result.output
