"""The nightly chain end to end (tiny model, small world, real DVC/GX/MLflow/Prefect).

Night 1 registers v1 and makes it champion. Night 2 evaluates on fewer
questions than the champion's stored results, so the champion is benchmarked
again on the candidate's questions; the equal candidate becomes challenger
with the reason recorded, and the unchanged data's gate is a cache hit.
Night 3's benchmark fails: the candidate is recorded as challenger and the
night fails.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
from prefect.testing.utilities import prefect_test_harness

from advrag.config import NightlyConfig, load_config
from advrag.flows.nightly import nightly
from advrag.ops import dataplane
from advrag.registry.promotion import CHALLENGER, CHAMPION
from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]
SMALL_ENTITIES = dict(n_countries=3, n_cities=8, n_people=16, n_organisations=6,
                      n_rivers=3, n_mountains=3)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A throwaway git+DVC repo with the project's stages, a small world and a tmp MLflow store."""
    from advrag.datasets import world

    root = tmp_path_factory.mktemp("nightly-project")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dataplane.run_dvc(["init", "-q"], root)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "advrag", root / "advrag")  # stage deps name source files
    base = world.WorldConfig
    with pytest.MonkeyPatch.context() as patch, prefect_test_harness(server_startup_timeout=120), \
            temporary_settings({PREFECT_LOCAL_STORAGE_PATH: root / ".prefect-storage"}):
        patch.chdir(root)
        patch.setattr(world, "WorldConfig", lambda **kw: base(**SMALL_ENTITIES, **kw))
        patch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(root / ".mlflow"))
        yield root


def tiny_config(project: Path, policy: Path, **evaluate) -> NightlyConfig:
    config = load_config(ROOT / "configs/nightly-tiny.yaml", NightlyConfig)
    train = config.train.model_copy(update={
        "model": str(policy), "checkpoint_dir": project / "ckpt",
        "evaluate": config.train.evaluate.model_copy(update=evaluate)})
    return config.model_copy(update={"train": train})


def task_states(flow_run_id) -> dict[str, str]:
    """Task name → state name of the flow run's own tasks."""
    flow_runs = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=flow_runs)
    return {r.name.rsplit("-", 1)[0]: r.state.name for r in runs}


def test_nightly_promotes_then_keeps_the_champion_then_fails_safe(project, tiny_policy_dir):
    client = mlflow.MlflowClient(tracking.configure())  # the module's store, whatever ran before
    name = "advrag-reasoner"

    first = nightly(tiny_config(project, tiny_policy_dir))
    assert (first["version"], first["alias"]) == ("1", CHAMPION)
    assert first["promotion.reason"] == "no champion yet; the candidate passed its checks"
    tags = client.get_model_version(name, "1").tags
    assert tags["data.gate"] == "passed" and tags["data.gate.version"] == tags["data.version"]
    assert tags["data.version"] == first["data_version"] == dataplane.data_version()["digest"]
    assert tags["bench.world.search_r1.n"] == "4.0000" and tags["git.commit"]
    assert client.get_run(tags["bench.run_id"]).info.status == "FINISHED"
    assert tracking.alias_version(name, CHAMPION) == "1"

    state = nightly(tiny_config(project, tiny_policy_dir, limit=3), return_state=True)
    second = state.result()
    assert (second["version"], second["alias"]) == ("2", CHALLENGER)
    assert second["promotion.reason"].startswith("not clearly better: EM diff")
    assert second["promotion.compared_with"] == "1"
    assert client.get_model_version(name, "2").tags["promotion.reason"] == second["promotion.reason"]
    assert tracking.alias_version(name, CHAMPION) == "1"
    assert tracking.alias_version(name, CHALLENGER) == "2"
    rerun = client.search_runs([client.get_experiment_by_name("advrag-benchmark").experiment_id],
                               filter_string="attributes.run_name = 'champion-v1'")
    assert [r.data.metrics["world/search_r1/n"] for r in rerun] == [3.0]
    states = task_states(state.state_details.flow_run_id)
    assert states["gate_data"] == "Cached" and states["reproduce_stages"] == "Completed"

    broken = tiny_config(project, tiny_policy_dir, datasets=["missing.jsonl"])
    with pytest.raises(FileNotFoundError):
        nightly(broken)
    tags = client.get_model_version(name, "3").tags
    assert tags["promotion.decision"] == CHALLENGER and "bench.run_id" not in tags
    assert tags["promotion.reason"] == "the candidate has no finished benchmark run"
    assert tracking.alias_version(name, CHAMPION) == "1"
