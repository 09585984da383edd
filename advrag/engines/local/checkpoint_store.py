"""Checkpoints mirrored to S3, so a run survives losing its machine (a reclaimed spot worker).

Checkpoints are written to the instance's disk (``checkpoint.save_checkpoint``; verl's trainer
its own, ``engines.verl.checkpoints``), which goes with the instance. Each engine names its
step directories its own way (``StepLayout``: ``step-00000003`` here, ``global_step_3`` for
verl); the store is the same for both. With ``ADVRAG_ARTIFACT_BUCKET`` set (the GPU workers' environment), each
checkpoint is also uploaded to ``s3://<bucket>/checkpoints/<its root>/<step dir>/`` with a
``COMPLETE`` marker written last, and the remote steps the local pruning dropped are deleted;
before a resume, complete remote steps missing locally are downloaded (each directory
atomically), so a fresh instance resumes from the newest one. A step without its marker (an
upload cut short) is never pulled. ``<its root>`` is the checkpoint root relative to the
working directory (the checkout), so the same config finds the same prefix on any worker.

Two workers share one bucket role, so neither trusts what the other wrote: a pulled object
key that resolves outside its step directory (``..``, an absolute path) is refused before
anything is written, and pruning deletes only the steps this run wrote. A run is named by the
token in its root's ``RUN_FILE`` (made at its first push, or taken from the newest pulled
step's marker when a fresh instance resumes it); each marker holds its run's token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advrag.common.fileio import atomic_dir
from advrag.engines.local.checkpoint import PREFIX

BUCKET_ENV = "ADVRAG_ARTIFACT_BUCKET"
MARKER = "COMPLETE"
RUN_FILE = ".checkpoint-run"
"""The run's token in its checkpoint root (module docstring)."""


@dataclass(frozen=True)
class StepLayout:
    """How an engine names a checkpoint step's directory: ``prefix`` and the step, zero-padded
    to ``width`` digits."""

    prefix: str
    width: int

    def name(self, step: int) -> str:
        """The directory name of ``step``."""
        return f"{self.prefix}{step:0{self.width}d}"

    def step(self, name: str) -> int | None:
        """The step a directory name holds, or None for any other name."""
        digits = name[len(self.prefix):]
        return int(digits) if name.startswith(self.prefix) and digits.isdigit() else None

    def steps(self, root: Path) -> dict[int, Path]:
        """Step → directory, for the step directories under ``root`` (none if it is absent)."""
        root = Path(root)
        found = ((self.step(p.name), p) for p in root.iterdir() if p.is_dir()) \
            if root.is_dir() else ()
        return dict(sorted((step, path) for step, path in found if step is not None))


LOCAL_STEPS = StepLayout(PREFIX, 8)
"""The local engine's ``step-00000003`` (``checkpoint.save_checkpoint``)."""


class UnsafeCheckpointKey(ValueError):
    """A bucket object whose key would be written outside its step directory."""


def run_token(root: Path) -> str:
    """The token of the run checkpointing into ``root``, made on first use."""
    import secrets

    path = Path(root) / RUN_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def inside(directory: Path, relative: str) -> Path:
    """``directory / relative``, refused (``UnsafeCheckpointKey``) where it resolves outside."""
    target = (directory / relative).resolve()
    if not target.is_relative_to(directory.resolve()) or target == directory.resolve():
        raise UnsafeCheckpointKey(
            f"refusing the bucket object {relative!r}: it would be written outside the step "
            f"directory {directory}; delete it from the bucket (another writer put it there)")
    return target


class CheckpointStore:
    """The checkpoints of any root, mirrored under ``s3://bucket/prefix/`` (module docstring)."""

    def __init__(self, bucket: str, prefix: str = "checkpoints", client: Any = None,
                 layout: StepLayout = LOCAL_STEPS) -> None:
        import boto3

        self.bucket, self.prefix = bucket.removeprefix("s3://").strip("/"), prefix.strip("/")
        self.client, self.layout = client or boto3.client("s3"), layout

    @classmethod
    def from_environment(cls, layout: StepLayout = LOCAL_STEPS) -> CheckpointStore | None:
        """The store ``ADVRAG_ARTIFACT_BUCKET`` names, or None when it is unset."""
        bucket = os.environ.get(BUCKET_ENV)
        return cls(bucket, layout=layout) if bucket else None

    def _root_key(self, root: Path) -> str:
        """The key prefix of checkpoint root ``root``."""
        root = Path(root).absolute()
        try:
            relative = root.relative_to(Path.cwd())
        except ValueError:
            relative = root.relative_to(root.anchor)
        return f"{self.prefix}/{relative.as_posix()}"

    def _remote_steps(self, root: Path) -> dict[int, set[str]]:
        """Remote step → its object keys, for every step under ``root``'s prefix."""
        base, steps = self._root_key(root) + "/", {}
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                      Prefix=base)
        for obj in (o for page in pages for o in page.get("Contents", [])):
            step = self.layout.step(obj["Key"][len(base):].split("/", 1)[0])
            if step is not None:
                steps.setdefault(step, set()).add(obj["Key"])
        return steps

    def complete_steps(self, root: Path) -> set[int]:
        """The steps of ``root`` whose upload finished (their marker is on the bucket)."""
        return {step for step, keys in self._remote_steps(root).items()
                if any(k.endswith(f"/{MARKER}") for k in keys)}

    def _marker(self, key: str) -> str:
        """The run token a step's marker holds ("" for a marker of no run)."""
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()

    def push(self, checkpoint: Path) -> None:
        """Upload ``checkpoint`` (a step directory), its marker (this run's token) last; then
        delete the remote steps this run wrote that its root no longer keeps."""
        checkpoint = Path(checkpoint)
        token = run_token(checkpoint.parent)
        base = f"{self._root_key(checkpoint.parent)}/{checkpoint.name}"
        for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
            self.client.upload_file(str(path), self.bucket,
                                    f"{base}/{path.relative_to(checkpoint).as_posix()}")
        self.client.put_object(Bucket=self.bucket, Key=f"{base}/{MARKER}", Body=token.encode())
        kept = set(self.layout.steps(checkpoint.parent))
        for step, keys in self._remote_steps(checkpoint.parent).items():
            marker = next((k for k in keys if k.endswith(f"/{MARKER}")), None)
            if step in kept or marker is None or self._marker(marker) != token:
                continue  # kept, still being written, or another run's
            for key in sorted(keys, key=lambda k: k.endswith(MARKER), reverse=True):
                self.client.delete_object(Bucket=self.bucket, Key=key)  # marker first

    def pull(self, root: Path) -> list[Path]:
        """Download every complete remote step ``root`` lacks; the directories written. A root
        without a run token takes the newest pulled step's, so the resumed run prunes the
        steps it wrote before its machine was lost. A key outside its step directory is
        refused (``UnsafeCheckpointKey``) before that step is written."""
        root, pulled, token = Path(root), [], ""
        local = set(self.layout.steps(root))
        for step, keys in sorted(self._remote_steps(root).items()):
            name = self.layout.name(step)
            base = f"{self._root_key(root)}/{name}/"
            if step in local or base + MARKER not in keys:
                continue
            with atomic_dir(root / name) as tmp:
                for key in sorted(keys - {base + MARKER}):
                    target = inside(tmp, key[len(base):])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.client.download_file(self.bucket, key, str(target))
            token = self._marker(base + MARKER)
            pulled.append(root / name)
        if token and not (root / RUN_FILE).is_file():
            (root / RUN_FILE).write_text(token)
        return pulled
