"""Prefect tasks of the data plane: world or files → gate → version → DVC stages."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from advrag.config import DataFiles, WorldSection
from advrag.ops import dataplane


@task
def build_world(section: WorldSection) -> Path:
    """Generate the offline world (0.4 s, deterministic; not cached, so a deleted
    world directory is always rebuilt — DVC's hashes make the rest a no-op)."""
    return dataplane.build_world(section.out_dir, section.world_config())


@task
def gate_files(qa_paths: list[Path], corpus_paths: list[Path], train: Path,
               heldout: list[Path]) -> None:
    """Great Expectations gate: raise with a readable report on any bad file, or on a ``train``
    split that holds a question of the ``heldout`` (dev, test) files."""
    from advrag.curation.gates import require_unleaked, require_valid

    require_valid(qa_paths, corpus_paths)
    require_unleaked(train, heldout)


@task
def import_files(files: DataFiles, out_dir: Path) -> Path:
    """Copy your files (gated already) under the raw-data directory, where DVC versions them."""
    return dataplane.import_files(files, out_dir)


@task
def point_stages_at(corpus: Path) -> bool:
    """``params.yaml``'s ``data.corpus``: the corpus `dvc repro` chunks."""
    return dataplane.point_stages_at(corpus)


@task(retries=2, retry_delay_seconds=2)
def version_raw_data(path: Path) -> str:
    """`dvc add` the raw inputs; returns their content hash."""
    return dataplane.version_raw_data(path)


@task
def data_version() -> dict[str, str]:
    """The DVC data version of the checkout (hashes of ``data.dvc`` and ``dvc.lock``)."""
    return dataplane.data_version()


@task(retries=1)
def reproduce_stages() -> dict[str, str]:
    """`dvc repro` of the data stages (a no-op when nothing changed); returns the data version."""
    dataplane.reproduce(targets=list(dataplane.DATA_STAGES))
    return dataplane.data_version()
