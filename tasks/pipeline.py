"""Prefect tasks of the pipeline: remember finished stages by the hash of their inputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.common.fileio import atomic_write_text
from advrag.config import DataConfig


def stage_key(*inputs: Any) -> str:
    """Hash of a stage's inputs (settings, upstream versions), 16 hex digits."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _marker(cache_dir: Path, name: str, key: str) -> Path:
    return Path(cache_dir) / f"{name}-{key}.json"


@task(cache_policy=NO_CACHE)
def finished_stage(cache_dir: Path, name: str, key: str) -> dict | None:
    """The result a stage recorded for these inputs, or None when it must run."""
    marker = _marker(cache_dir, name, key)
    return json.loads(marker.read_text()) if marker.is_file() else None


@task(cache_policy=NO_CACHE)
def record_stage(cache_dir: Path, name: str, key: str, result: dict) -> None:
    """Remember a finished stage (written atomically, after the stage's own outputs)."""
    atomic_write_text(_marker(cache_dir, name, key), [json.dumps(result, default=str, indent=1)])


def corpus_and_questions(data: DataConfig) -> tuple[list, list]:
    """The passages and training questions a pipeline will run on, before its data stage has
    written them: the world it will generate (in memory, under a second), or your files."""
    from advrag.common.types import Passage
    from advrag.datasets.loaders import load_qa
    from advrag.datasets.world import generate_world
    from advrag.retrieval.retriever import read_passages

    if data.world is None:
        return read_passages(data.files.corpus), load_qa(data.files.train)
    world = generate_world(data.world.world_config())
    return [Passage(p["id"], p["contents"]) for p in world.passages], world.splits["train"]
