"""The nightly configs at test size, written into a project with the tiny model's path."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def write_tiny_nightly(root: Path, policy: Path, recipe: dict | None = None) -> Path:
    """``root/configs/nightly.yaml`` from ``configs/nightly-tiny.yaml``, its recipe and
    discriminator files beside it with ``model`` set to ``policy`` (and ``recipe`` laid over
    the recipe's settings); the nightly config's path, relative to ``root``."""
    (root / "configs").mkdir(exist_ok=True)
    nightly = yaml.safe_load((ROOT / "configs/nightly-tiny.yaml").read_text())
    for key, extra in (("recipe", recipe or {}), ("discriminator", {})):
        settings = yaml.safe_load((ROOT / nightly[key]).read_text())
        (root / nightly[key]).write_text(yaml.safe_dump(settings | {"model": str(policy)} | extra))
    (root / "configs/nightly.yaml").write_text(yaml.safe_dump(nightly))
    return Path("configs/nightly.yaml")
