"""Learning records that outlive a machine: one committed file per finished arm and per start,
and the sampled sets a run is built from (gzipped, ``read_text``/``write_text``).

A learning protocol of several arms and seeds runs longer than this project's sessions, and a
session's ``.cache/`` (checkpoints, the rebuilt start policy) does not outlive it. So an arm is
trained *and* scored in one session, and what the protocol needs of it afterwards — its
per-update curves and its scored held-out rows — is written to
``bench/results/<record>/<arm>-seed<k>.json``, which is committed. A later session skips the
arms that have a record and trains the others.

Every session rebuilds the start policy from its recipe. The rebuild is the same on one kind of
CPU, but not across kinds (the kernels round differently), so each arm's record names its
start by the digest of the start's weights, and each start is scored once, into
``start-<digest>.json``. An arm is compared with its own start.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from advrag.common.fileio import atomic_file, atomic_write_text


def read_text(path: Path) -> str:
    """A committed text file, gunzipped when its name ends in ``.gz``."""
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def write_text(path: Path, text: str) -> None:
    """Write ``text`` whole or not at all, gzipped (reproducibly: no time stamp) for ``.gz``."""
    with atomic_file(path) as tmp:
        tmp.write_bytes(gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz"
                        else text.encode())


def model_digest(model_dir: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a saved model's weight files (sorted by name)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{model_dir}: no *.safetensors weights to name the start policy by")
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


class ArmRecords:
    """The committed records of one learning protocol, in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def load(self, name: str) -> dict | None:
        """The record of arm ``name`` (e.g. ``grpo-seed0``), or None when it has not run."""
        path = self.path(name)
        return json.loads(path.read_text()) if path.is_file() else None

    def write(self, name: str, record: dict) -> None:
        """Write ``name``'s record whole or not at all, stamped with the date it finished."""
        record = record | {"finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        atomic_write_text(self.path(name), [json.dumps(record, indent=1), "\n"])

    def start_rows(self, digest: str, score: Callable[[], list[dict]]) -> list[dict]:
        """The held-out rows of the start whose weights have ``digest``: read back, or scored
        once with ``score`` and recorded."""
        name = f"start-{digest}"
        record = self.load(name)
        if record is None:
            record = {"digest": digest, "rows": score()}
            self.write(name, record)
        return record["rows"]
