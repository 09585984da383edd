"""Flow `prepare_data`: build the world, gate it, version it, index it."""

from __future__ import annotations

from prefect import flow

from advrag.common import console
from advrag.config import DataConfig
from advrag.tasks import data


@flow(name="prepare_data", log_prints=True)
def prepare_data(config: DataConfig = DataConfig()) -> dict[str, str]:
    """World → GX gate → `dvc add data` → `dvc repro`; returns the data version."""
    with console.progress("data", 4 if config.dvc_repro else 3, "steps") as bar:
        world_dir = data.build_world(config.world)
        qa_files = [world_dir / f"{prefix}{split}.jsonl" for prefix in ("", "reasoning_")
                    for split in ("train", "dev", "test")]
        bar.update()
        data.gate_files([*qa_files, *config.extra_files], [world_dir / "corpus.jsonl"])
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
