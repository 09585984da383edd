"""Training checkpoints that resume exactly: weights, optimizer, schedule, RNG, data position.

Layout of one checkpoint, ``<root>/step-<8 digits>/``:

- ``weights/``: the adapter (LoRA) or the whole model (full fine-tune) as
  safetensors via ``save_pretrained``, plus the tokenizer, so the directory is
  also a loadable model (full) or adapter (LoRA);
- ``optimizer.pt``, ``scheduler.pt``: their ``state_dict()``s;
- ``rng.pt``: python ``random``, numpy and torch CPU (and CUDA, where present)
  generator states;
- ``state.json``: ``step``, ``data_position``, ``config_hash``, caller's ``extra``.

Each checkpoint directory is written atomically (``fileio.atomic_dir``): a kill
during a save leaves the previous checkpoints intact and no partial one under
a ``step-*`` name. Everything loads with ``torch.load(weights_only=True)``
(numpy's RNG state is stored as tensors and ints for that reason). A checkpoint whose
files cannot be read back raises ``CorruptCheckpoint``, and a resume falls back to the
one before it (``dual.AgentTrainers.resume``).
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from advrag.common.fileio import atomic_dir
from advrag.engines.local.policy import TrainablePolicy

PREFIX = "step-"


def rng_state() -> dict[str, Any]:
    """Every random generator's state, in ``torch.load(weights_only=True)``-safe types."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators saved by ``rng_state``."""
    random.setstate(state["python"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_step(path: Path) -> int | None:
    """The step of a ``step-<n>`` directory name, or None for anything else."""
    name = path.name
    digits = name[len(PREFIX) :]
    return int(digits) if name.startswith(PREFIX) and digits.isdigit() else None


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root``, oldest step first (none if ``root`` is absent)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The checkpoint with the highest step under ``root``, or None."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def prune_checkpoints(root: str | Path, keep_last: int) -> None:
    """Delete all but the ``keep_last`` newest checkpoints under ``root``."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    for old in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old)


def save_checkpoint(
    root: str | Path,
    *,
    policy: TrainablePolicy,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    data_position: int,
    config_hash: str,
    extra: dict[str, Any] | None = None,
    keep_last: int = 3,
) -> Path:
    """Write ``<root>/step-<step>`` atomically, then keep only the ``keep_last`` newest.

    Args:
        step: updates completed so far (the resumed run continues with ``step + 1``).
        data_position: how far the caller's data stream got (e.g. records consumed).
        config_hash: ``config_hash(config)`` of the run, checked on load.
        extra: JSON-serialisable facts the caller wants back on resume.

    Returns:
        The checkpoint directory.
    """
    target = Path(root) / f"{PREFIX}{step:08d}"
    with atomic_dir(target) as tmp:
        policy.save_weights(tmp / "weights")
        tokenizer.save_pretrained(tmp / "weights")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        state = {
            "step": step,
            "data_position": data_position,
            "config_hash": config_hash,
            "extra": extra or {},
        }
        (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    prune_checkpoints(root, keep_last)
    return target


def load_checkpoint(
    directory: str | Path,
    policy: TrainablePolicy,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    expected_config_hash: str | None = None,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and RNG states in place; return ``state.json``.

    Build ``policy`` from the base weights and ``optimizer``/``scheduler`` the way
    the saving run did, then call this last (it overwrites the RNG state that
    construction consumed). Raises ``ValueError`` if ``expected_config_hash``
    is given and differs from the saved one.
    """
    directory = Path(directory)
    with _unreadable_is_corrupt(directory):
        state = json.loads((directory / "state.json").read_text())
        saved_hash = state["config_hash"]
    if expected_config_hash is not None and saved_hash != expected_config_hash:
        raise ValueError(
            f"{directory} was written with config {saved_hash}, "
            f"this run has {expected_config_hash}: resume with the same config"
        )
    with _unreadable_is_corrupt(directory):
        policy.load_weights(directory / "weights")
        optimizer.load_state_dict(
            torch.load(directory / "optimizer.pt", map_location="cpu", weights_only=True)
        )
        scheduler.load_state_dict(
            torch.load(directory / "scheduler.pt", map_location="cpu", weights_only=True)
        )
        set_rng_state(torch.load(directory / "rng.pt", map_location="cpu", weights_only=True))
    return state


class CorruptCheckpoint(RuntimeError):
    """A checkpoint whose files cannot be read back (a disk fault, a truncated copy)."""


@contextmanager
def _unreadable_is_corrupt(directory: Path) -> Iterator[None]:
    """Reading ``directory`` failing for a damaged file raises ``CorruptCheckpoint`` naming it."""
    try:
        yield
    except (OSError, EOFError, KeyError, RuntimeError, ValueError, pickle.UnpicklingError,
            SafetensorError) as error:
        raise CorruptCheckpoint(f"checkpoint {directory} cannot be read: "
                                f"{type(error).__name__}: {error}"[:500]) from error
