"""The nightly pipeline end to end (tiny model, small world, real DVC/GX/MLflow/Prefect).

Night 1 runs every stage as a run nested under the night's run, registers the
reasoner, the jointly trained discriminator and the SFT discriminator, and
makes each champion (the first of its name), with the data gate on every
version. Night 2, on unchanged data and settings, skips the discriminator SFT
and the RL stage and registers nothing. Night 3 asks for one more update: RL
resumes from night 1's checkpoint (one update run, not two), the new reasoner
is judged against the champion on the same questions and its partner follows
it. Then `promote --force` and `rollback` move the reasoner's champion there and
back; the other models are reached by name.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
from tiny_configs import write_tiny_nightly

from advrag.flows.nightly import nightly, promote, rollback
from advrag.ops import dataplane
from advrag.registry.promotion import CHALLENGER, CHAMPION
from advrag.tasks import promotion as promo
from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]
REASONER, PARTNER, JUDGE = "advrag-reasoner", "advrag-gar-discriminator", "advrag-discriminator"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(prefect_server, tmp_path_factory):
    """A throwaway git+DVC repo with the project's stages, a small world and a tmp MLflow store."""
    root = tmp_path_factory.mktemp("nightly-project")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dataplane.run_dvc(["init", "-q"], root)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "advrag", root / "advrag")  # stage deps name source files
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(root / ".mlflow"))
        yield root


def nested_runs(client: mlflow.MlflowClient, run_id: str) -> dict[str, str]:
    """Run name → run id of the runs nested under ``run_id``."""
    experiment = client.get_run(run_id).info.experiment_id
    runs = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{run_id}'")
    return {r.info.run_name: r.info.run_id for r in runs}


def test_nights_skip_resume_promote_and_roll_back(project, tiny_policy_dir):
    config = write_tiny_nightly(project, tiny_policy_dir)
    client = mlflow.MlflowClient(tracking.configure())

    first = nightly(str(config))
    digest = dataplane.data_version()["digest"]
    assert first["data_version"] == digest
    assert client.get_run(first["run_id"]).info.run_name == "nightly"
    stages = nested_runs(client, first["run_id"])
    assert set(stages) == {"warm-up", "discriminator-sft", "gar"}
    assert stages["gar"] == first["trained"]["run_id"]
    assert stages["discriminator-sft"] == first["discriminator"]["run_id"]
    decisions = first["decisions"]
    assert list(decisions) == [REASONER, PARTNER, JUDGE]
    assert {name: (d["version"], d["alias"]) for name, d in decisions.items()} == {
        REASONER: ("1", CHAMPION), PARTNER: ("1", CHAMPION), JUDGE: ("1", CHAMPION)}
    assert decisions[PARTNER]["promotion.reason"] == (
        f"trained with {REASONER} v1, which became champion: no champion yet; the candidate "
        "passed its checks")
    for name in decisions:
        tags = client.get_model_version(name, "1").tags
        assert (tags["data.gate"], tags["data.gate.version"], tags["data.version"]) == (
            "passed", digest, digest), name
        assert tracking.alias_version(name, CHAMPION) == "1"
    judge_tags = client.get_model_version(JUDGE, "1").tags
    assert judge_tags["data.slices.version"] == first["discriminator"]["slices_version"]
    evidence = promo.candidate_evidence.fn(JUDGE, "1", "search_r1", "judgments")
    assert evidence.benchmark_finished and evidence.gate_passed
    assert len(evidence.em) == first["discriminator"]["metrics"]["n"]  # one score per held-out slice
    assert client.get_model_version(REASONER, "1").tags["bench.world.search_r1.n"] == "4.0000"

    second = nightly(str(config))
    assert second["discriminator"]["run_id"] == first["discriminator"]["run_id"]  # skipped
    assert second["trained"]["run_id"] == first["trained"]["run_id"]  # skipped
    assert set(nested_runs(client, second["run_id"])) == {"warm-up"}  # cached: no SFT steps
    assert {d["promotion.reason"] for d in second["decisions"].values()} >= {"already the champion"}
    assert all(tracking.latest_version(name) == "1" for name in decisions)

    config = write_tiny_nightly(project, tiny_policy_dir, recipe={"steps": 2})
    third = nightly(str(config))
    assert third["trained"]["steps_run"] == 1  # resumed from night 1's checkpoint after update 1
    assert third["discriminator"]["run_id"] == first["discriminator"]["run_id"]
    decision, partner = third["decisions"][REASONER], third["decisions"][PARTNER]
    assert decision["version"] == "2" and decision["promotion.compared_with"] == "1"
    # v1 and v2 score the same on each of the 4 test questions: a tie, held back
    assert (decision["alias"], partner["alias"]) == (CHALLENGER, CHALLENGER)
    assert decision["promotion.reason"] == ("not clearly better: EM diff +0.000, 95% CI "
                                            "[+0.000, +0.000], needs lower bound > 0.0")
    assert partner["promotion.reason"].startswith(f"trained with {REASONER} v2, which became ")

    forced = promote(str(config), version="2", force=True)
    assert (forced["version"], forced["alias"]) == ("2", CHAMPION)
    assert tracking.alias_version(REASONER, CHAMPION) == "2"
    back = rollback(str(config))
    assert (back["name"], back["restored"], back["demoted"]) == (REASONER, "1", "2")
    assert tracking.alias_version(REASONER, CHAMPION) == "1"
    assert client.get_model_version(REASONER, "2").tags["promotion.rolled_back"].startswith(
        "champion returned to v1")
    with pytest.raises(LookupError, match=f"champion v1 of '{JUDGE}' replaced no earlier"):
        rollback(str(config), model=JUDGE)
    assert promote(str(config), model=JUDGE)["promotion.reason"] == "already the champion"
    with pytest.raises(ValueError, match=f"{PARTNER} is promoted with the reasoner"):
        promote(str(config), model=PARTNER)
    with pytest.raises(ValueError, match="not registered by this config — choose one of"):
        promote(str(config), model="advrag-nope")


def test_a_night_whose_config_fails_its_checks_fails_at_once(project, tiny_policy_dir,
                                                             monkeypatch):
    """A config the pipeline's checks refuse (here a verl section for a recipe verl cannot
    train) fails the night at once: the retried part (``night``) never starts, so no minute
    goes to retrying what cannot pass."""
    import advrag.flows.nightly as nights
    from advrag.config import ConfigError, PipelineConfig, load_config
    from advrag.config.flows import VerlSection

    started = []
    monkeypatch.setattr(nights, "night", started.append)
    config = load_config(write_tiny_nightly(project, tiny_policy_dir), PipelineConfig)
    with pytest.raises(ConfigError, match="--engine verl runs recipes grpo and ur2"):
        nightly(config.model_copy(update={"verl": VerlSection()}))
    assert started == []
