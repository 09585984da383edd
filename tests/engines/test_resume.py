"""Kill-and-resume exactness: a resumed run's next steps equal an uninterrupted run's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from resume_worker import build, load_records, run, trainable_state

from advrag.engines.local.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    rng_state,
    set_rng_state,
)
from advrag.engines.local.trainer import seed_everything

WORKER = Path(__file__).with_name("resume_worker.py")


@pytest.fixture
def one_thread():
    """Same thread count here and in the worker processes (reductions depend on it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def uninterrupted(tiny_policy_dir, small_world_dir):
    """Steps 1..4 without a break, per variant: (metrics by step, final trainable weights)."""
    done = {}

    def get(lora: bool):
        if lora not in done:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            trainer, generator = build(tiny_policy_dir, lora=lora)
            metrics = run(trainer, generator, load_records(small_world_dir), position=0, until=4)
            done[lora] = metrics, trainable_state(trainer)
            torch.set_num_threads(threads)
        return done[lora]

    return get


def test_resumed_lora_steps_equal_the_uninterrupted_run(
    tiny_policy_dir, small_world_dir, tmp_path, one_thread, uninterrupted
):
    """In one process, LoRA; the killed-process test below covers full fine-tuning."""
    lora = True
    records = load_records(small_world_dir)
    want_metrics, want_params = uninterrupted(lora)

    first, generator = build(tiny_policy_dir, lora=lora)
    run(first, generator, records, position=0, until=2, checkpoint_root=tmp_path)
    del first, generator
    trainer, generator = build(tiny_policy_dir, lora=lora)  # fresh model, optimizer, schedule
    state = trainer.resume(latest_checkpoint(tmp_path))
    assert state["step"] == 2 and state["data_position"] == 2
    weights = latest_checkpoint(tmp_path) / "weights"
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= {
        p.name for p in weights.iterdir()
    }
    got_metrics = run(trainer, generator, records, position=state["data_position"], until=4)

    assert got_metrics == {3: want_metrics[3], 4: want_metrics[4]}
    got_params = trainable_state(trainer)
    assert got_params.keys() == want_params.keys()
    assert all(torch.equal(got_params[n], want_params[n]) for n in want_params)


def test_without_the_rng_state_the_resumed_run_diverges(
    tiny_policy_dir, small_world_dir, tmp_path, one_thread, uninterrupted
):
    """Control: the exactness above depends on restoring the sampler's RNG."""
    records = load_records(small_world_dir)
    want_metrics, _ = uninterrupted(True)
    first, generator = build(tiny_policy_dir, lora=True)
    run(first, generator, records, position=0, until=2, checkpoint_root=tmp_path)
    trainer, generator = build(tiny_policy_dir, lora=True)
    trainer.config = trainer.config.model_copy(update={"lr": 0.5})
    with pytest.raises(ValueError, match="same config"):
        trainer.resume(latest_checkpoint(tmp_path))
    trainer.config = first.config
    state = trainer.resume(latest_checkpoint(tmp_path))
    seed_everything(12345)
    got_metrics = run(trainer, generator, records, position=state["data_position"], until=3)
    assert got_metrics[3] != want_metrics[3]


def test_a_killed_process_resumes_exactly(
    tiny_policy_dir, small_world_dir, tmp_path, uninterrupted
):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    args = [
        sys.executable,
        str(WORKER),
        str(tiny_policy_dir),
        str(small_world_dir),
        str(checkpoints),
        str(out),
    ]
    worker = subprocess.Popen(
        [*args, "--until", "3", "--hang"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        lines = []
        for line in worker.stdout:  # ends early (EOF) only if the worker crashed
            lines.append(line)
            if line.startswith("checkpointed 2"):
                break
        os.kill(worker.pid, signal.SIGKILL)  # during step 3 or while it waits: step 3 is lost
    finally:
        worker.kill()
        worker.wait(timeout=30)
    assert lines and lines[-1].startswith("checkpointed 2"), lines
    assert worker.returncode == -signal.SIGKILL
    saved = latest_checkpoint(checkpoints)
    assert saved.name == "step-00000002"
    assert {"optimizer.pt", "scheduler.pt", "rng.pt", "state.json", "weights"} == {
        p.name for p in saved.iterdir()
    }
    assert (saved / "weights" / "model.safetensors").is_file()

    subprocess.run(
        [*args, "--until", "4", "--resume"],
        check=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
    )
    want_metrics, want_params = uninterrupted(False)
    got_metrics = {int(k): v for k, v in json.loads((out / "metrics.json").read_text()).items()}
    assert got_metrics == {3: want_metrics[3], 4: want_metrics[4]}
    from safetensors.torch import load_file

    got_params = load_file(out / "params.safetensors")
    assert got_params.keys() == want_params.keys()
    assert all(torch.equal(got_params[n], want_params[n]) for n in want_params)


def test_checkpoint_listing_ignores_partial_writes_and_prunes_oldest(tmp_path):
    for step in (1, 2, 10):
        (tmp_path / f"step-{step:08d}").mkdir()
    (tmp_path / ".step-00000011.abc.tmp").mkdir()  # an interrupted atomic write
    (tmp_path / "notes").mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step-00000001",
        "step-00000002",
        "step-00000010",
    ]
    assert latest_checkpoint(tmp_path).name == "step-00000010"
    prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000010"]
    assert latest_checkpoint(tmp_path / "missing") is None


def test_rng_state_round_trips_through_a_safe_torch_load(tmp_path):
    import random

    import numpy as np

    seed_everything(3)
    torch.save(rng_state(), tmp_path / "rng.pt")
    want = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(4)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == want


def test_a_corrupt_newest_checkpoint_falls_back_to_the_one_before_exactly(
    tiny_policy_dir, small_world_dir, tmp_path, one_thread, uninterrupted, capsys
):
    """The newest checkpoint's optimizer file damaged: the resume takes the previous one and
    the steps after it equal the uninterrupted run's; none readable: one error naming them."""
    from advrag.engines.local.checkpoint import CorruptCheckpoint
    from advrag.engines.local.dual import AgentTrainers

    records = load_records(small_world_dir)
    want_metrics, want_params = uninterrupted(True)
    first, generator = build(tiny_policy_dir, lora=True)
    run(first, generator, records, position=0, until=4, checkpoint_root=tmp_path)
    previous, newest = list_checkpoints(tmp_path)  # steps 2 and 4 (one every 2, keep 2)
    (newest / "optimizer.pt").write_bytes(b"not a torch file")
    trainer, generator = build(tiny_policy_dir, lora=True)
    state = AgentTrainers({"reasoner": trainer}).resume(tmp_path)
    assert state["step"] == json.loads((previous / "state.json").read_text())["step"] == 2
    assert f"checkpoint {newest} cannot be read" in capsys.readouterr().out
    got_metrics = run(trainer, generator, records, position=state["data_position"], until=4)
    assert got_metrics == {k: want_metrics[k] for k in (3, 4)}
    got_params = trainable_state(trainer)
    assert all(torch.equal(got_params[n], want_params[n]) for n in want_params)

    (previous / "state.json").write_text("{truncated")
    (newest / "optimizer.pt").write_bytes(b"")
    later, _ = build(tiny_policy_dir, lora=True)
    with pytest.raises(CorruptCheckpoint, match="no checkpoint under .* can be read back"):
        AgentTrainers({"reasoner": later}).resume(tmp_path)


def test_a_run_whose_machine_is_lost_resumes_from_the_bucket_exactly(
    tiny_policy_dir, small_world_dir, tmp_path, uninterrupted
):
    """Checkpoints mirrored to S3 (moto's server): the worker is killed after step 2's
    checkpoint, its local checkpoints are deleted with its disk, a fresh start pulls step 2
    from the bucket, and steps 3 and 4 equal the uninterrupted run's, bit for bit."""
    import socket

    import boto3
    from safetensors.torch import load_file

    from advrag.engines.local.checkpoint_store import MARKER

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # moto's S3 in its own process: its Flask must not load into this one, where vLLM's
    # engine start walks every loaded module and trips over Flask's context proxies
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = "127.0.0.1"
    try:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
               "AWS_CONFIG_FILE": str(tmp_path / "none"),
               "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
               "ADVRAG_ARTIFACT_BUCKET": "advrag-test-artifacts"}
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        for _ in range(100):  # until the server answers
            try:
                s3.create_bucket(Bucket="advrag-test-artifacts")
                break
            except Exception:  # noqa: BLE001 (not listening yet)
                time.sleep(0.1)
        checkpoints, out = tmp_path / "disk" / "checkpoints", tmp_path / "out"
        args = [sys.executable, str(WORKER), str(tiny_policy_dir), str(small_world_dir),
                str(checkpoints), str(out)]
        worker = subprocess.Popen([*args, "--until", "3", "--hang"], stdout=subprocess.PIPE,
                                  text=True, cwd=tmp_path, env=env)
        try:
            for line in worker.stdout:
                if line.startswith("checkpointed 2"):
                    break
            os.kill(worker.pid, signal.SIGKILL)
        finally:
            worker.kill()
            worker.wait(timeout=30)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="advrag-test-artifacts")["Contents"]}
        assert f"checkpoints/disk/checkpoints/step-00000002/{MARKER}" in keys
        shutil.rmtree(tmp_path / "disk")  # the instance and its disk are gone

        subprocess.run([*args, "--until", "4", "--resume"], check=True, timeout=300, cwd=tmp_path,
                       env=env, stdout=subprocess.DEVNULL)
    finally:
        moto.kill()
        moto.wait(timeout=30)
    want_metrics, want_params = uninterrupted(False)
    got_metrics = {int(k): v for k, v in json.loads((out / "metrics.json").read_text()).items()}
    assert got_metrics == {3: want_metrics[3], 4: want_metrics[4]}
    got_params = load_file(out / "params.safetensors")
    assert all(torch.equal(got_params[n], want_params[n]) for n in want_params)
