"""The pipeline on your own files: `data.files` in the config, the copy DVC versions, the
corpus `dvc repro` reads, and recipe settings that need the generated world refused early."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from advrag.config import ConfigError, DataConfig, PipelineConfig, load_config
from advrag.ops import dataplane

ROOT = Path(__file__).resolve().parents[2]
QA = [{"id": "u1", "question": "Which river runs through Ostan?", "golden_answers": ["Vell"]},
      {"id": "u2", "question": "Who built the Tarn bridge?", "golden_answers": ["Mira Holt"]}]


def user_files(root: Path) -> dict[str, Path]:
    """A corpus and three QA files as a user brings them: JSON lines, a JSON array, parquet."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = root / "passages.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "contents": f"Title {i}\nText {i}."})
                              + "\n" for i in range(3)))
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QA))
    (root / "dev.json").write_text(json.dumps(QA[:1]))
    pd.DataFrame(QA[1:]).to_parquet(root / "test.parquet")
    return {"corpus": corpus, "train": root / "train.jsonl", "dev": root / "dev.json",
            "test": root / "test.parquet"}


def test_files_replace_the_world_and_live_under_the_raw_data(tmp_path):
    config = DataConfig(files=user_files(tmp_path))
    assert config.world is None and config.dataset_dir == Path("data/files")
    assert DataConfig().world is not None and DataConfig().dataset_dir == Path("data/world")


def test_world_and_files_together_or_neither_fail_naming_the_fix(tmp_path):
    files = user_files(tmp_path)
    with pytest.raises(ValueError, match="give world: .* or files: .*not both"):
        DataConfig(world={"seed": 1}, files=files)
    with pytest.raises(ValueError, match="world: null needs files:"):
        DataConfig(world=None)


def test_a_config_extending_one_with_the_world_swaps_it_for_your_files(tmp_path):
    files = {k: str(v) for k, v in user_files(tmp_path).items()}
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"extends": str(ROOT / "configs" / "pipeline-demo.yaml"),
                                    "data": {"files": files}}))
    with pytest.raises(ConfigError, match="not both.*sets world: null beside its files:"):
        load_config(mine, PipelineConfig)
    mine.write_text(yaml.safe_dump({"extends": str(ROOT / "configs" / "pipeline-demo.yaml"),
                                    "data": {"world": None, "files": files}}))
    config = load_config(mine, PipelineConfig)
    assert config.data.world is None and config.data.files.train == Path(files["train"])


@pytest.mark.parametrize(("split", "name", "message"), [
    ("test", "missing.jsonl", r"test: .*missing\.jsonl does not exist"),
    ("corpus", "passages.parquet", r"corpus: .* is not a \.jsonl file \(one \{id, contents\}"),
    ("dev", "dev.csv", r"dev: .* is not a \.jsonl or \.json or \.parquet file \(QA rows"),
])
def test_a_bad_file_entry_fails_when_the_config_loads(tmp_path, split, name, message):
    files = user_files(tmp_path)
    files[split] = tmp_path / name
    if name != "missing.jsonl":
        files[split].write_text("x")
    with pytest.raises(ValueError, match=message):
        DataConfig(files=files)


def test_the_files_are_copied_as_the_stages_read_them_and_left_alone_when_unchanged(tmp_path):
    config = DataConfig(files=user_files(tmp_path / "mine"))
    out = dataplane.import_files(config.files, tmp_path / "data/files")
    assert (out / "corpus.jsonl").read_bytes() == config.files.corpus.read_bytes()
    rows = {split: [json.loads(x) for x in (out / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "dev", "test")}
    assert [r["id"] for r in rows["train"]] == ["u1", "u2"]
    assert [r["golden_answers"] for r in rows["test"]] == [["Mira Holt"]]  # from parquet
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    dataplane.import_files(config.files, out)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps  # DVC sees nothing
    config.files.dev.write_text(json.dumps(QA))  # the user edits a file: that copy changes
    dataplane.import_files(config.files, out)
    assert len((out / "dev.jsonl").read_text().splitlines()) == 2
    assert (out / "train.jsonl").stat().st_mtime_ns == stamps["train.jsonl"]


def test_the_chunk_stage_is_pointed_at_the_corpus_in_params_yaml(tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    assert not dataplane.point_stages_at(Path("data/world/corpus.jsonl"), tmp_path)  # as shipped
    before = (tmp_path / "params.yaml").read_text()
    assert dataplane.point_stages_at(Path("data/files/corpus.jsonl"), tmp_path)
    after = (tmp_path / "params.yaml").read_text()
    assert yaml.safe_load(after)["data"] == {"corpus": "data/files/corpus.jsonl",
                                             "dir": "data/files"}
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert [b.split("#")[0].rstrip() for _, b in changed] == [
        "  corpus: data/files/corpus.jsonl", "  dir: data/files"]  # their comments kept
    (tmp_path / "params.yaml").write_text("chunk: {max_words: 128}\n")
    with pytest.raises(dataplane.DvcError, match="no data.corpus line"):
        dataplane.point_stages_at(Path("data/files/corpus.jsonl"), tmp_path)


def test_the_dvc_stages_read_the_data_params_and_none_names_the_world():
    text = (ROOT / "dvc.yaml").read_text()
    stages = yaml.safe_load(text)["stages"]
    assert "${data.corpus}" in stages["chunk"]["cmd"] and "${data.corpus}" in stages["chunk"]["deps"]
    for name in ("curate", "gar-slices"):
        assert stages[name]["cmd"].endswith("--world-dir ${data.dir}")
        assert "${data.dir}" in stages[name]["deps"]
    assert "data/world" not in "".join(line.split("#")[0] for line in text.splitlines())


@pytest.mark.parametrize(("command", "kind"), [("curate", "ur2"), ("gar-slices", "discriminator")])
def test_the_world_dir_option_replaces_the_configs(monkeypatch, command, kind):
    from typer.testing import CliRunner

    from advrag import cli

    seen = {}

    def load(path, model_kind, overrides=None):
        seen[model_kind] = overrides
        raise SystemExit(0)  # stop before any flow runs

    monkeypatch.setattr(cli.train, "load", load)  # the module of `curate` and `gar-slices`
    CliRunner().invoke(cli.app, [command, "--world-dir", "data/files"])
    assert seen == {kind: {"world_dir": "data/files"}}


def test_the_embed_stage_reads_its_device_from_params():
    embed = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["embed"]
    assert "--device ${embed.device}" in embed["cmd"]
    assert yaml.safe_load((ROOT / "params.yaml").read_text())["embed"]["device"] == "cpu"


@pytest.mark.parametrize(("recipe", "overrides", "refused"), [
    ("gar.yaml", {}, None),  # its SFT labels your slices with your golden answers
    ("arr.yaml", {}, None),  # its warm-up dialogues search your questions themselves
    ("ur2.yaml", {}, "reasoning_share: 0"),
    ("ur2.yaml", {"reasoning_share": 0}, None),
    ("train.yaml", {}, None),
])
def test_recipe_settings_that_read_the_world_are_refused_before_any_stage(
        tmp_path, recipe, overrides, refused):
    from advrag.flows.pipeline import check_data
    from advrag.recipes import recipe_for

    config = PipelineConfig(data={"files": user_files(tmp_path)}, recipe=ROOT / "configs" / recipe)
    chosen = recipe_for(config.recipe, overrides)
    if refused is None:
        check_data(config, chosen)
        return
    with pytest.raises(ConfigError, match=f"data.files has no generated world.*{refused}"):
        check_data(config, chosen)
    check_data(PipelineConfig(recipe=ROOT / "configs" / recipe), chosen)  # the world has it all


def test_a_budget_your_passages_overflow_is_refused_before_any_stage(tmp_path):
    """The preflight counts your corpus and questions: passages of 400 words make a 2-turn
    episode longer than train.yaml's max_seq_len, so the pipeline is refused naming it."""
    from advrag.flows.pipeline import check_budgets
    from advrag.recipes import recipe_for

    files = user_files(tmp_path)
    config = PipelineConfig(data={"files": files}, recipe=ROOT / "configs/train.yaml")
    check_budgets(config, recipe_for(config.recipe))  # the short passages fit
    long = "".join(json.dumps({"id": f"p{i}", "contents": f"Title {i}\n" + "word " * 400})
                   + "\n" for i in range(3))
    files["corpus"].write_text(long)
    with pytest.raises(ConfigError, match="optim.max_seq_len = 3072 cannot hold an RL episode"):
        check_budgets(config, recipe_for(config.recipe))
