"""Typed configs: the shipped YAML validates; typos and bad values are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from advrag.config import BenchmarkConfig, DemoConfig, TrainFlowConfig, load_config

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
    assert cfg.optim == {"lr": 1e-5, "group_size": 8}


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
