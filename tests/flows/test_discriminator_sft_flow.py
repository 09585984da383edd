"""GAR discriminator SFT end to end with a tiny model: slices → gate → SFT → scores → registry."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
import torch
from safetensors.torch import load_file

from advrag.curation.gar_data import dev_and_measured
from advrag.engines.local.dual import shared_lora_policies
from advrag.engines.local.policy import ADAPTER_FILE
from advrag.flows.discriminator_sft import discriminator_sft
from advrag.models.loading import load_policy
from advrag.ops import dataplane
from advrag.recipes.gar import DiscriminatorSFTConfig
from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path, world, index, policy) -> DiscriminatorSFTConfig:
    return DiscriminatorSFTConfig(
        model=str(policy), lora={"r": 4, "alpha": 8}, cpu_bf16=False, patience=1,
        sft={"lr": 1e-2, "epochs": 3, "batch_size": 8, "micro_batch_size": 8, "max_seq_len": 2048},
        max_new_tokens=12, questions=12, heldout_fraction=0.25, world_dir=world, index_dir=index,
        out_dir=tmp_path / "slices", checkpoint_dir=tmp_path / "ckpt", experiment="disc-test",
        registered_model="tiny-discriminator", rollouts=1, rollout_max_new_tokens=8)


def test_the_flow_registers_a_discriminator_whose_adapter_loads_back(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    result = discriminator_sft(cfg)

    client = mlflow.MlflowClient()
    assert client.get_model_version("tiny-discriminator", result["version"]).run_id == result["run_id"]
    run = client.get_run(result["run_id"])
    for key in ("accuracy", "f1", "auroc", "malformed", "n"):
        assert f"heldout/{key}" in run.data.metrics, key
        assert run.data.metrics[f"heldout/{key}"] == pytest.approx(result["metrics"][key],
                                                                   nan_ok=True)
    history = {k: [m.value for m in sorted(client.get_metric_history(result["run_id"],
                                                                      f"sft/dev_{k}"),
                                            key=lambda m: m.step)] for k in ("auroc", "loss")}
    best = int(result["training"]["best_epoch"]) - 1  # the first epoch of the highest AUROC
    assert history["auroc"].index(max(history["auroc"])) == best
    assert result["training"]["dev_auroc"] == pytest.approx(history["auroc"][best])
    assert result["training"]["dev_loss"] == pytest.approx(history["loss"][best])
    assert client.get_metric_history(result["run_id"], "sft/loss")
    assert {"heldout/confusion.png", "heldout/judgments.json"} <= {
        a.path for a in client.list_artifacts(result["run_id"], "heldout")}
    assert tracking.list_artifacts(result["run_id"], "discriminator") == ["discriminator/adapter"]

    rows = [json.loads(line) for line in (tmp_path / "slices" / "slices.jsonl").read_text().splitlines()]
    held = [r for r in rows if r["split"] == "heldout"]
    dev, measured = dev_and_measured(rows, cfg.dev_fraction, cfg.seed)
    # the epoch is chosen on some held-out questions' slices and scored on the others'
    assert not {r["question_id"] for r in dev} & {r["question_id"] for r in measured}
    assert len(dev) + len(measured) == len(held) and dev and measured
    assert run.data.metrics["sft/dev_slices"] == result["training"]["dev_slices"] == len(dev)
    assert result["metrics"]["n"] == len(measured)
    held = measured
    assert {r["source"] for r in rows} == {"demonstration", "corrupted", "rollout"}
    for source in {r["source"] for r in held}:  # each source's own held-out measure
        assert result["metrics"][f"{source}/n"] == sum(r["source"] == source for r in held)
        assert f"heldout/{source}/auroc" in run.data.metrics
    assert sum(r["sound"] for r in rows) * 2 == len(rows)
    version = hashlib.sha256((tmp_path / "slices" / "slices.jsonl").read_bytes()).hexdigest()
    assert run.data.tags["data.slices.version"] == result["slices_version"] == version
    assert client.get_model_version("tiny-discriminator", result["version"]).tags[
        "data.slices.version"] == version
    assert_the_cli_writes_the_same_slices(cfg, tmp_path, tmp_path / "slices" / "slices.jsonl")

    fresh = shared_lora_policies(load_policy(str(tiny_policy_dir), dtype="float32").model,
                                 cfg.lora, names=("discriminator",))["discriminator"]
    fresh.load_weights(result["adapter_dir"])
    saved = load_file(f"{result['adapter_dir']}/{ADAPTER_FILE}")
    weights = {n: p for n, p in fresh.model.named_parameters() if ".discriminator." in n}
    assert len(weights) == len(saved) > 0
    for name, tensor in saved.items():
        (match,) = [p for n, p in weights.items() if n.replace(".discriminator", "") == name]
        assert torch.equal(match, tensor), name
    assert any(t.abs().sum() > 0 for n, t in saved.items() if "lora_B" in n)  # trained, not fresh
    merged = fresh.model.merge_and_unload().state_dict()
    exported = load_policy(result["model_dir"], dtype="float32").model.state_dict()
    assert merged.keys() == exported.keys()
    assert all(torch.allclose(merged[k], exported[k], atol=1e-6) for k in merged)


def test_a_slice_set_written_before_is_trained_on_as_it_is(
        prefect_server, tmp_path, monkeypatch, small_world_dir, small_index_dir, tiny_policy_dir):
    """``slices:`` names a set `gar-slices` wrote: the SFT gates and trains on it, builds and
    writes none, and tags the run with its version."""
    from advrag.flows.discriminator_sft import gar_slices

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path / "ml"))
    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    written = Path(gar_slices(cfg)["slices"])
    given = cfg.model_copy(update={"slices": written, "out_dir": tmp_path / "not-written"})
    result = discriminator_sft(given)
    assert result["slices"] == str(written) and not (tmp_path / "not-written").exists()
    version = hashlib.sha256(written.read_bytes()).hexdigest()
    run = mlflow.MlflowClient().get_run(result["run_id"])
    assert run.data.tags["data.slices.version"] == version
    _, measured = dev_and_measured(list(map(json.loads, written.read_text().splitlines())),
                                   cfg.dev_fraction, cfg.seed)
    assert result["metrics"]["n"] == len(measured)
    assert tracking.list_artifacts(result["run_id"], "slices") == ["slices/slices"]
    with pytest.raises(FileNotFoundError, match="slices: .*advrag gar-slices"):
        discriminator_sft(given.model_copy(update={"slices": tmp_path / "missing.jsonl"}))


def assert_the_cli_writes_the_same_slices(cfg: DiscriminatorSFTConfig, tmp_path, flow_file):
    """`advrag gar-slices` (the DVC stage's command) on the same config writes the same bytes."""
    import yaml
    from typer.testing import CliRunner

    from advrag.cli import app

    settings = cfg.model_dump(mode="json") | {"out_dir": str(tmp_path / "cli-slices")}
    (tmp_path / "disc.yaml").write_text(yaml.safe_dump(settings))
    result = CliRunner().invoke(app, ["gar-slices", "--config", str(tmp_path / "disc.yaml")])
    assert result.exit_code == 0, result.output
    written = (tmp_path / "cli-slices" / "slices.jsonl").read_bytes()
    assert written == flow_file.read_bytes()
    assert hashlib.sha256(written).hexdigest() in result.output


def test_dvc_knows_the_slice_stage_and_what_it_depends_on(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dataplane.run_dvc(["init", "-q"], tmp_path)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    listed = dataplane.run_dvc(["stage", "list"], tmp_path)
    assert "gar-slices" in listed and "processed/gar_slices" in listed
    dag = dataplane.run_dvc(["dag", "gar-slices", "--dot"], tmp_path)
    for upstream in ("index", "discriminator-policy-hash"):
        assert f'"{upstream}" -> "gar-slices"' in dag, dag
    stage = yaml_stages()["gar-slices"]
    assert {"${data.dir}", "processed/index"} <= set(stage["deps"])  # params.yaml: data/world
    assert stage["cmd"].startswith("advrag gar-slices --config configs/discriminator.yaml")


def test_policy_hash_fingerprints_a_discriminator_config(tmp_path, tiny_policy_dir):
    from typer.testing import CliRunner

    from advrag.cli import app
    from advrag.curation.curate import policy_fingerprint

    config = tmp_path / "disc.yaml"
    config.write_text(f"extends: {ROOT / 'configs' / 'discriminator.yaml'}\nmodel: {tiny_policy_dir}\n")
    out = tmp_path / "policy.sha256"
    args = ["policy-hash", "--kind", "discriminator", "--config", str(config), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.read_text() == policy_fingerprint(tiny_policy_dir) + "\n"
    bad = CliRunner().invoke(app, [*args[:2], "gar", *args[3:]])
    assert bad.exit_code == 2 and "choose ur2 or discriminator" in bad.output


def yaml_stages() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_rollouts_to_label_resume_from_their_cache(tmp_path, small_world_dir, small_index_dir,
                                                   tiny_policy_dir):
    """A killed labelling run left 5 whole rollouts and half a line: the rerun keeps those 5,
    cuts the half line and samples the other 7 (12 questions, 1 rollout each)."""
    from advrag.agents.types import Trajectory
    from advrag.datasets.loaders import load_qa
    from advrag.retrieval.retriever import load_retriever
    from advrag.tasks import discriminator as steps

    cfg = config(tmp_path, small_world_dir, small_index_dir, tiny_policy_dir)
    policy, tokenizer = steps.load_discriminator.fn(cfg, str(tiny_policy_dir))
    records = load_qa(cfg.world_dir / "train.jsonl")[:cfg.questions]
    retriever = load_retriever(cfg.index_dir, kind="dense")
    cache = steps.rollout_cache(cfg, str(tiny_policy_dir))
    first = steps.sampled_rollouts(cfg, policy, tokenizer, records, retriever, cache)
    assert len(first) == 12 and len(cache.read_text().splitlines()) == 12
    lines = cache.read_text().splitlines(keepends=True)
    cache.write_text("".join(lines[:5]) + lines[5][:40])  # killed while writing the sixth
    again = steps.sampled_rollouts(cfg, policy, tokenizer, records, retriever, cache)
    assert [t.to_json() for t in again[:5]] == [t.to_json() for t in first[:5]]
    assert len(again) == 12 and len(cache.read_text().splitlines()) == 12
    assert all(isinstance(t, Trajectory) and t.segments for t in again)
    assert steps.rollout_cache(cfg.model_copy(update={"rollouts": 2}), str(tiny_policy_dir)) != cache
