"""A verl run survives losing its worker: each step verl completes is pushed to the bucket while
its trainer runs, and a fresh worker's run pulls the newest complete one and resumes from it
(flows/verl.run_verl, engines/verl/mirror.py, on moto's S3 server).

verl's trainer needs GPUs, so a stand-in plays it, as a separate process doing what verl's
does with its ``default_local_dir``: resume from the step ``latest_checkpointed_iteration.txt``
names (``trainer.resume_mode=auto``), save ``global_step_<N>/`` and then name ``N`` there.
The first run is killed (SIGKILL) after step 2, midway through writing step 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")

BUCKET = "advrag-verl-checkpoints"
STAND_IN = """
import json, os, signal, sys, time
from pathlib import Path

root, total, die_after = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
root.mkdir(parents=True, exist_ok=True)
latest = root / "latest_checkpointed_iteration.txt"
start = int(latest.read_text()) if latest.is_file() else 0
with open(root.parent / "starts.jsonl", "a") as log:
    log.write(json.dumps({"resumed_from": start,
                          "found": sorted(p.name for p in root.glob("global_step_*"))}) + "\\n")
for step in range(start + 1, total + 1):
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_text(f"weights after step {step}")
    if die_after and step == die_after + 1:  # the worker is reclaimed mid-save
        os.kill(os.getpid(), signal.SIGKILL)
    (actor / "fsdp_config.json").write_text("{}")
    (root / f"global_step_{step}" / "data.pt").write_text(f"dataloader at {step}")
    latest.write_text(str(step))
    time.sleep(1.0)  # a training step: the mirror looks every 0.1 s
"""


@pytest.fixture()
def verl_run(s3, tmp_path, monkeypatch):
    """run_verl with the stand-in as verl's trainer, the bucket set, an MLflow store in tmp;
    calls it with (root, die_after) and returns the trainer's exit status."""
    import mlflow

    from advrag.engines.verl import launch, mirror
    from advrag.flows import verl as verl_flow

    s3.bucket(BUCKET)
    monkeypatch.setenv("ADVRAG_ARTIFACT_BUCKET", BUCKET)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    previous = mlflow.get_tracking_uri()  # an earlier test may have set one for the process
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setattr(mirror, "EVERY_S", 0.1)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)

    def run(root: Path, die_after: int = 0) -> None:
        def trainer(overrides, run_id=None):
            values = dict(o.split("=", 1) for o in overrides)
            return subprocess.run([sys.executable, str(script), values[
                "trainer.default_local_dir"], values["trainer.total_training_steps"],
                str(die_after)], check=False).returncode

        monkeypatch.setattr(launch, "launch", trainer)
        from omegaconf import OmegaConf

        with mlflow.start_run() as active:
            verl_flow.run_verl([f"trainer.default_local_dir={root}",
                                "trainer.total_training_steps=4"], OmegaConf.create({}),
                               active.info.run_id, "verl", root)

    yield run
    mlflow.set_tracking_uri(previous)


def test_a_run_killed_after_a_step_resumes_from_it_on_an_empty_disk(verl_run, s3, tmp_path):
    root = tmp_path / "ckpt" / "verl"
    with pytest.raises(RuntimeError, match="exited with status -9"):
        verl_run(root, die_after=2)
    keys = s3.keys(BUCKET)
    assert {f"checkpoints/ckpt/verl/global_step_{n}/COMPLETE" for n in (1, 2)} <= keys
    assert not any("global_step_3" in key for key in keys)  # cut short: never pushed

    shutil.rmtree(tmp_path / "ckpt")  # a fresh worker: an empty local disk, the same bucket
    (tmp_path / "ckpt").mkdir()
    verl_run(root)

    [start] = [json.loads(line) for line in (tmp_path / "ckpt/starts.jsonl").read_text().splitlines()]
    assert start == {"resumed_from": 2, "found": ["global_step_1", "global_step_2"]}
    assert (root / "global_step_2/actor/model_world_size_1_rank_0.pt").read_text() == \
        "weights after step 2"  # the pulled step is the one the lost worker wrote
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert {f"checkpoints/ckpt/verl/global_step_{n}/COMPLETE" for n in (1, 2, 3, 4)} <= \
        s3.keys(BUCKET)


def test_without_a_bucket_verl_runs_on_its_own_disk(verl_run, tmp_path, monkeypatch):
    monkeypatch.delenv("ADVRAG_ARTIFACT_BUCKET")
    root = tmp_path / "ckpt" / "verl"
    verl_run(root)
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert not (root / ".checkpoint-run").exists()  # no store touched it
