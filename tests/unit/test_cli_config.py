"""The CLI on configs: a bad file exits 2 with one message and no traceback; `config show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_config import SHIPPED
from typer.testing import CliRunner

from advrag.cli import app
from advrag.config import BenchmarkConfig, DemoConfig, PipelineConfig, config_hash, load_config
from advrag.recipes.arr import ArrConfig
from advrag.recipes.grpo import GrpoConfig

ROOT = Path(__file__).resolve().parents[2]
# Runs the CLI, then prints which heavy libraries it had imported by the time it exited.
PROBE = ("import sys\nfrom advrag.cli import app\ntry:\n    app(sys.argv[1:])\nfinally:\n"
         "    print(sorted(m for m in ('prefect', 'torch', 'mlflow') if m in sys.modules))")
TYPO = {"adversarial-rl": "recipe: arr\noptim: {lr_rate: 1.0e-5}\n",
        "rl": "recipe: arr\noptim: {lr_rate: 1.0e-5}\n",
        "nightly": "promotion: {lr_rate: 1.0e-5}\n",
        "promote": "promotion: {lr_rate: 1.0e-5}\n",
        "rollback": "promotion: {lr_rate: 1.0e-5}\n",
        "demo": "promotion: {lr_rate: 1.0e-5}\n",
        "prepare-data": "benchmark: {lr_rate: 1.0e-5}\n",
        "benchmark": "benchmark: {lr_rate: 1.0e-5}\n",
        "train": "optim: {lr_rate: 1.0e-5}\n"}


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m advrag.cli ARGS`` in a subprocess (what a user's shell runs)."""
    return subprocess.run([sys.executable, "-m", "advrag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_typo_exits_2_with_the_one_line_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TYPO["train"])
    result = cli("train", "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (f"error: {bad}: invalid GrpoConfig config: optim.lr_rate: "
                             "unknown field — did you mean 'lr'?\n")
    assert result.stdout == ""


@pytest.mark.parametrize("command", sorted(TYPO))
def test_every_config_command_stops_a_typo_before_prefect_or_a_model(tmp_path, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TYPO[command])
    result = subprocess.run([sys.executable, "-c", PROBE, command, "--config", str(bad)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {bad}: invalid ")
    assert "lr_rate: unknown field" in result.stderr and len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout.strip() == "[]"  # neither Prefect nor MLflow was imported
    assert not (tmp_path / ".mlflow").exists()  # nothing started, nothing written


def test_missing_file_and_bad_values_exit_2_naming_the_problem(tmp_path):
    missing = cli("train", "--config", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    zero = tmp_path / "zero.yaml"
    zero.write_text("topk: 0\n")
    result = CliRunner().invoke(app, ["train", "--config", str(zero)])
    assert result.exit_code == 2
    assert "topk: Input should be greater than or equal to 1 (got 0)" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_benchmark_options_are_validated_like_the_file():
    result = CliRunner().invoke(app, ["benchmark", "--config", str(ROOT / "configs/demo.yaml"),
                                      "--limit", "0", "--methods", "cot,naive-rag"])
    assert result.exit_code == 2
    assert "benchmark.limit: Input should be greater than or equal to 1 (got 0)" in result.stderr
    assert "did you mean 'naive_rag'?" in result.stderr


@pytest.mark.parametrize(("path", "model"), sorted(SHIPPED.items()))
def test_config_show_prints_the_resolved_config_and_its_hash(path, model):
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / "configs" / path)])
    assert result.exit_code == 0, result.output
    header, body = result.stdout.split("\n", 1)
    loaded = load_config(ROOT / "configs" / path, model)
    assert header == f"# {ROOT / 'configs' / path} as {model.__name__}; hash {config_hash(loaded)}"
    assert model.model_validate(yaml.safe_load(body)) == loaded  # every default, round-trips
    assert yaml.safe_load(result.stdout) == yaml.safe_load(body)  # the header is a YAML comment


def test_config_show_detects_the_kind_and_fills_every_default():
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / "configs/arr-no-adv.yaml")])
    shown = yaml.safe_load(result.stdout)
    assert shown["adversarial_reward"] is False  # the ablation, laid over arr.yaml
    assert shown["optim"]["clip_high"] == 0.2 and shown["recipe"] == "arr"  # defaults filled in


@pytest.mark.parametrize(("text", "model"), [
    ("", DemoConfig), ("data: {dvc_repro: true}\n", DemoConfig),
    ("benchmark: {topk: 2}\n", DemoConfig), ("data: {}\nrecipe: configs/gar.yaml\n", PipelineConfig),
    ("topk: 2\nmodel: x\n", BenchmarkConfig), ("steps: 2\noptim: {lr: 1.0}\n", GrpoConfig),
    ("recipe: grpo\n", GrpoConfig), ("recipe: arr\n", ArrConfig),
    ("lam: 0.3\nsteps: 2\n", ArrConfig)])
def test_config_show_guesses_the_model_from_recipe_or_keys(tmp_path, text, model):
    (tmp_path / "c.yaml").write_text(text)
    result = CliRunner().invoke(app, ["config", "show", str(tmp_path / "c.yaml")])
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n", 1)[0].startswith(f"# {tmp_path / 'c.yaml'} as {model.__name__};")


def test_config_show_takes_the_kind_and_refuses_an_unknown_one(tmp_path):
    (tmp_path / "c.yaml").write_text("topk: 2\n")
    result = CliRunner().invoke(app, ["config", "show", str(tmp_path / "c.yaml"), "--kind", "train"])
    assert result.exit_code == 0 and " as GrpoConfig; " in result.stdout
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / "configs/train.yaml"),
                                      "--kind", "nightli"])
    assert result.exit_code == 2
    assert result.stderr == "error: --kind: unknown kind 'nightli' — did you mean 'nightly'?\n"


def test_config_show_of_a_bad_file_exits_2_with_the_message(tmp_path):
    (tmp_path / "c.yaml").write_text("recipe: arr\nlam: -1\n")
    result = cli("config", "show", str(tmp_path / "c.yaml"), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {tmp_path / 'c.yaml'}: invalid ArrConfig "
                                    "config: lam: Input should be greater than or equal to 0")
    assert "Traceback" not in result.stderr
