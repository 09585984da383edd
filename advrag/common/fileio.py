"""Atomic writes shared by every stage: readers see the old or the complete new artefact.

Each writer fills a temporary sibling and moves it into place with
``os.replace``, so an interrupted run never leaves a half-written file or
directory where DVC, a loader or a later stage expects a finished one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask_mode(full: int) -> int:
    """``full`` permissions minus the process umask (what open()/mkdir() would give)."""
    mask = os.umask(0)
    os.umask(mask)
    return full & ~mask


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path next to ``path``; on success move it onto ``path``, else delete it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _umask_mode(0o666))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temp directory next to ``path``; on success swap it in for ``path``.

    An existing ``path`` is moved aside first and deleted only after the new
    directory is in place, so readers see either the old or the new directory.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, _umask_mode(0o777))
        old = None
        if target.exists():
            old = Path(
                tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
            )
            os.replace(target, old / "d")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def atomic_write_text(path: str | os.PathLike, chunks: Iterable[str]) -> None:
    """Write text chunks to ``path`` atomically (UTF-8, fsynced before the rename)."""
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.writelines(chunks)
        handle.flush()
        os.fsync(handle.fileno())
