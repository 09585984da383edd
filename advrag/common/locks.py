"""One run at a time per directory, across processes: the checkpoint root, the data directory.

A scheduled night and a run started by hand may share ``checkpoint_dir`` (the second would
prune the first's checkpoints) or ``data/`` (the second rebuilds the world under the
first). ``exclusive(directory)`` holds an ``fcntl`` lock on ``<directory>/.lock`` for the
block — the lock file sits beside the directory (``data`` → ``.data.lock``), so nothing
inside it changes and DVC versions it unchanged; the kernel releases the lock when the
holder exits, even killed, so a crash leaves no stale lock. A second process gets ``DirectoryBusy`` at once, naming the holder (its pid,
start time and command, which the holder writes into the lock file). Within one process
the lock is re-entrant: the pipeline holds the data directory, and the data step it runs
takes it again. Readers of a directory (an RL run, a benchmark reading ``data/``) hold it
``shared``: they run side by side, and a writer (the data step, ``advrag world``) is refused
at once while any of them holds it, as it is while another writer does.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

_held: dict[Path, tuple[IO[str], int]] = {}
"""This process's locks: directory → (open lock file, nesting depth)."""


def lock_path(directory: Path) -> Path:
    """The lock file of ``directory``: a hidden file beside it."""
    return directory.parent / f".{directory.name}.lock"


class DirectoryBusy(RuntimeError):
    """Another process holds the directory this run needs."""


@contextmanager
def exclusive(directory: str | Path, what: str) -> Iterator[None]:
    """Hold ``directory`` (which need not exist yet) for the block, alone; ``what`` names it in
    the error."""
    with _locked(directory, what, fcntl.LOCK_EX):
        yield


@contextmanager
def shared(directory: str | Path, what: str) -> Iterator[None]:
    """Hold ``directory`` for reading: any number of readers at once, but no ``exclusive``
    holder (a rebuild of the data under a training run or a benchmark)."""
    with _locked(directory, what, fcntl.LOCK_SH):
        yield


@contextmanager
def _locked(directory: str | Path, what: str, mode: int) -> Iterator[None]:
    """``exclusive`` or ``shared`` (``mode``), re-entrant within this process."""
    directory = Path(directory).resolve()
    if directory in _held:
        handle, depth = _held[directory]
        _held[directory] = (handle, depth + 1)
        try:
            yield
        finally:
            _held[directory] = (handle, depth)
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path(directory), "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "a process that has not written its name yet"
        handle.close()
        raise DirectoryBusy(f"{what} {directory} is in use by another run ({holder}): wait "
                            "for it to finish, or give this run its own directory") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, since {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, "
                 f"{' '.join(sys.argv)[:200]}\n")
    handle.flush()
    _held[directory] = (handle, 1)
    try:
        yield
    finally:
        del _held[directory]
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
