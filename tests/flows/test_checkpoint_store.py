"""Checkpoints mirrored to S3 (moto's server, a real S3 API): what one worker may trust of what
another wrote to the shared bucket."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from advrag.engines.local.checkpoint_store import (
    MARKER,
    RUN_FILE,
    CheckpointStore,
    UnsafeCheckpointKey,
)

BUCKET = "advrag-checkpoints"  # emptied before each test (the moto server outlives them)


def step(root: Path, n: int, text: str = "weights") -> Path:
    """A checkpoint directory ``step-n`` with one file and one nested file."""
    directory = root / f"step-{n:08d}"
    (directory / "reasoner").mkdir(parents=True)
    (directory / "trainer.json").write_text(f'{{"step": {n}}}')
    (directory / "reasoner" / "adapter.safetensors").write_text(f"{text} {n}")
    return directory


@pytest.fixture()
def store(s3, tmp_path, monkeypatch) -> CheckpointStore:
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET) \
            if BUCKET in {b["Name"] for b in s3.client.list_buckets()["Buckets"]} else ():
        for obj in page.get("Contents", []):
            s3.client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    s3.client.create_bucket(Bucket=BUCKET)
    monkeypatch.chdir(tmp_path)
    return CheckpointStore(BUCKET, client=s3.client)


def test_a_pushed_step_is_pulled_whole_onto_an_empty_disk_with_its_run(store, s3, tmp_path):
    pushed = step(tmp_path / "ckpt", 2)
    store.push(pushed)
    token = (tmp_path / "ckpt" / RUN_FILE).read_text()
    keys = s3.keys(BUCKET)
    assert f"checkpoints/ckpt/step-00000002/{MARKER}" in keys
    before = {p.relative_to(pushed): p.read_bytes() for p in pushed.rglob("*") if p.is_file()}
    shutil.rmtree(tmp_path / "ckpt")  # the instance and its disk are lost
    assert store.pull(tmp_path / "ckpt") == [tmp_path / "ckpt" / "step-00000002"]
    after = {p.relative_to(pushed): p.read_bytes() for p in pushed.rglob("*") if p.is_file()}
    assert after == before
    assert (tmp_path / "ckpt" / RUN_FILE).read_text() == token  # the resumed run is the same run


@pytest.mark.parametrize("planted", ["../../../../escaped.txt", "reasoner/../../escaped.txt"])
def test_a_key_that_leaves_its_step_directory_is_refused_and_nothing_is_written(
        store, s3, tmp_path, planted):
    store.push(step(tmp_path / "elsewhere" / "ckpt", 1))  # a complete step on the bucket...
    s3.client.put_object(Bucket=BUCKET, Key=f"checkpoints/ckpt/step-00000001/{planted}",
                         Body=b"planted")  # ...and a key another worker planted in it
    s3.client.put_object(Bucket=BUCKET, Key=f"checkpoints/ckpt/step-00000001/{MARKER}", Body=b"")
    root = tmp_path / "ckpt"
    with pytest.raises(UnsafeCheckpointKey, match="outside the step directory"):
        store.pull(root)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not (root / "step-00000001").exists() and not list(root.glob(".step-*"))


def test_pruning_deletes_only_the_steps_this_run_wrote(store, s3, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")  # another worker, the same root: the same prefix
    store.push(step(tmp_path / "b" / "ckpt", 5))
    monkeypatch.chdir(tmp_path / "a")
    root = tmp_path / "a" / "ckpt"
    store.push(step(root, 1))
    shutil.rmtree(root / "step-00000001")  # pruned locally, as the trainer does
    store.push(step(root, 2))
    steps = {k.split("/")[2] for k in s3.keys(BUCKET)}
    assert steps == {"step-00000002", "step-00000005"}  # its own step 1 gone, b's step 5 kept
