"""Typed configs: the shipped YAML validates; typos and bad values are named."""

from __future__ import annotations

from pathlib import Path

import pytest

import advrag.config as config_package
from advrag.config import (
    AdversarialRLConfig,
    BenchmarkConfig,
    ConfigError,
    DemoConfig,
    NightlyConfig,
    Strict,
    TrainFlowConfig,
    load_config,
)

ROOT = Path(__file__).resolve().parents[2]


def test_demo_config_validates():
    cfg = load_config(ROOT / "configs/demo.yaml", DemoConfig)
    assert cfg.benchmark.methods == ["cot", "naive_rag", "search_r1", "arr"]
    assert cfg.data.world.out_dir == Path("data/world")


def test_unknown_key_is_an_error_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark:\n  modle: smollm2\n")
    with pytest.raises(ValueError, match="modle"):
        load_config(bad, DemoConfig)


def test_unknown_method_is_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [cot, telepathy]\n")
    with pytest.raises(ValueError, match="telepathy"):
        load_config(bad, BenchmarkConfig)


def test_missing_file_says_where_examples_are(tmp_path):
    with pytest.raises(FileNotFoundError, match="configs/"):
        load_config(tmp_path / "nope.yaml", DemoConfig)


def test_extends_lays_the_file_over_its_parent(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base/grandparent.yaml").write_text(
        "steps: 5\nmax_turns: 3\noptim: {lr: 1.0e-5, group_size: 4}\n")
    (tmp_path / "base/parent.yaml").write_text(
        "extends: grandparent.yaml\nsteps: 7\noptim: {group_size: 8}\n")
    (tmp_path / "child.yaml").write_text("extends: base/parent.yaml\nmax_turns: 1\nwarmup: null\n")
    cfg = load_config(tmp_path / "child.yaml", TrainFlowConfig)
    # the nearest file wins; nested mappings merge key by key; null replaces
    assert (cfg.steps, cfg.max_turns, cfg.warmup) == (7, 1, None)
    assert cfg.optim.model_dump(exclude_unset=True) == {"lr": 1e-5, "group_size": 8}


def test_extends_errors_name_the_file_and_the_fix(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ValueError, match="cycle.*remove one"):
        load_config(tmp_path / "a.yaml", BenchmarkConfig)
    (tmp_path / "self.yaml").write_text("extends: self.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(tmp_path / "self.yaml", BenchmarkConfig)
    (tmp_path / "orphan.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(FileNotFoundError, match=r"missing.yaml does not exist \(named by extends: in"):
        load_config(tmp_path / "orphan.yaml", BenchmarkConfig)
    (tmp_path / "list.yaml").write_text("extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ValueError, match="takes one file path"):
        load_config(tmp_path / "list.yaml", BenchmarkConfig)


def test_every_field_of_every_config_model_says_what_it_does():
    models = [m for m in vars(config_package).values()
              if isinstance(m, type) and issubclass(m, Strict) and m is not Strict]
    assert len(models) >= 12
    missing = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items()
               if not info.description]
    assert missing == []


@pytest.mark.parametrize(("path", "model"), [
    ("demo.yaml", DemoConfig), ("train.yaml", TrainFlowConfig), ("arr.yaml", AdversarialRLConfig),
    ("arr-no-adv.yaml", AdversarialRLConfig), ("arr-no-proc.yaml", AdversarialRLConfig),
    ("nightly.yaml", NightlyConfig), ("nightly-tiny.yaml", NightlyConfig)])
def test_every_shipped_config_loads(path, model):
    assert isinstance(load_config(ROOT / "configs" / path, model), model)


def test_one_message_names_each_bad_field_and_its_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lr_rate: 1.0e-5}\ntopk: 0\nwarmup: {sft: {epochs: 0}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, TrainFlowConfig)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{bad}: invalid TrainFlowConfig config:"
    assert "  - optim.lr_rate: unknown field — did you mean 'lr'?" in lines
    assert any(line.startswith("  - topk: Input should be greater than or equal to 1 (got 0)")
               and "Passages per search." in line for line in lines)
    assert any(line.startswith("  - warmup.sft.epochs: Input should be greater than or equal "
                               "to 1 (got 0)") for line in lines)


def test_broken_yaml_and_nested_typos_are_config_errors(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: {optim: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken, NightlyConfig)
    typo = tmp_path / "typo.yaml"
    typo.write_text("train:\n  lora: {rank: 8}\n")
    with pytest.raises(ConfigError, match=r"train\.lora\.rank: unknown field — did you mean 'r'\?"):
        load_config(typo, NightlyConfig)
    far = tmp_path / "far.yaml"
    far.write_text("train:\n  zzz: 1\n")
    with pytest.raises(ConfigError, match="train.zzz: unknown field — remove it; valid fields"):
        load_config(far, NightlyConfig)
