"""Flow `prepare_data`: the world or your files, gated, versioned, indexed."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from advrag.common import console
from advrag.common.fileio import remove_leftovers
from advrag.common.locks import exclusive
from advrag.config import DataConfig
from advrag.tasks import data


@flow(name="prepare_data", log_prints=True)
def prepare_data(config: DataConfig = DataConfig()) -> dict[str, str]:
    """World (or your files, gated first and copied under ``raw_dir/files``) → GX gate →
    ``params.yaml``'s corpus → `dvc add data` → `dvc repro`; returns the data version. Bad files
    fail the gate before anything is written; another run holding ``raw_dir`` stops this one
    (``common.locks``)."""
    with exclusive(config.raw_dir, "the data directory"), \
            console.progress("data", 4 if config.dvc_repro else 3, "steps") as bar:
        for folder in (config.raw_dir, config.dataset_dir):
            remove_leftovers(folder)  # a killed write's temporary copies
        qa_files, corpus = source_files(config)
        bar.update()
        data.gate_files([*qa_files, *config.extra_files], [corpus], train=qa_files[0],
                        heldout=qa_files[1:3])
        if config.files is not None:
            data.import_files(config.files, config.dataset_dir)
        data.point_stages_at(config.dataset_dir / "corpus.jsonl")
        bar.update()
        data.version_raw_data(config.raw_dir)
        bar.update()
        if not config.dvc_repro:
            return {}
        version = data.reproduce_stages()
        bar.set_postfix_str(f"version {version['digest']}", refresh=False)
        bar.update()
    print(f"data version {version['digest']}")
    return version


def source_files(config: DataConfig) -> tuple[list[Path], Path]:
    """The QA files (train, dev, test first) and the corpus the gate checks: the world's
    (generated first, with its reasoning splits) or your files as you gave them."""
    if config.files is not None:
        files = config.files
        return [files.train, files.dev, files.test], files.corpus
    world_dir = data.build_world(config.world)
    return ([world_dir / f"{prefix}{split}.jsonl" for prefix in ("", "reasoning_")
             for split in ("train", "dev", "test")], world_dir / "corpus.jsonl")
