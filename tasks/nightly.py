"""Prefect tasks only the nightly flow needs: the data gate, cached on the data's content."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE


@task(cache_policy=NO_CACHE)
def content_digest(paths: list[Path]) -> str:
    """SHA-256 over the files' names and bytes: changes exactly when the data does."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(str(path).encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@task(cache_policy=INPUTS + TASK_SOURCE, persist_result=True)
def gate_data(qa_paths: list[Path], corpus_paths: list[Path], digest: str) -> dict[str, str]:
    """Great Expectations gate; raises with the report on bad data.

    Deterministic in the files' content, which ``digest`` carries into the
    cache key: a night with unchanged data reuses the verdict instead of
    re-validating. A failure is never cached.
    """
    from advrag.curation.gates import require_valid

    require_valid(qa_paths, corpus_paths)
    return {"data.gate": "passed", "data.gate.digest": digest}
