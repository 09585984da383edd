"""Atomic writes shared by every stage: readers see the old or the complete new artefact.

Each writer fills a temporary sibling and moves it into place with
``os.replace``, so an interrupted run never leaves a half-written file or
directory where DVC, a loader or a later stage expects a finished one; both are
fsynced, so neither does a power loss. A SIGKILL can leave the temporary sibling
behind: ``remove_leftovers`` clears those when the next run starts.
"""

from __future__ import annotations

import hashlib
import os
import re
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


def _fsync(path: str | os.PathLike) -> None:
    """Flush ``path`` (a file or a directory) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under ``root``, ``root`` last."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync(Path(directory) / name)
        _fsync(directory)


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path next to ``path``; on success move it onto ``path``, else delete it.

    The new file is on the disk before the rename and the rename before this returns
    (the file, then its directory, fsynced): a power loss leaves the old or the new file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _umask_mode(0o666))
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(target.parent)
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
        _fsync_tree(tmp)
        old = None
        if target.exists():
            old = Path(
                tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
            )
            os.replace(target, old / "d")
        os.replace(tmp, target)
        _fsync(target.parent)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


LEFTOVER = re.compile(r"^\..+\.[A-Za-z0-9_]+\.(?:tmp|old)$")
"""The names ``atomic_file`` and ``atomic_dir`` give their temporary siblings."""


def _restore_moved_aside(old: Path) -> None:
    """An ``atomic_dir`` killed between its two renames left the previous copy in ``old``
    (``.<name>.<x>.old/d``) and nothing at ``<name>``: put the previous copy back."""
    target = old.parent / old.name[1:].rsplit(".", 2)[0]
    if old.is_dir() and (old / "d").is_dir() and not target.exists():
        os.replace(old / "d", target)
        _fsync(old.parent)


def remove_leftovers(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary siblings a killed writer left in ``directory`` (``LEFTOVER``
    names only), first giving back a directory ``atomic_dir`` had moved aside when it was
    killed before the new copy took its place; the removed paths. Call it only while no
    writer works there (under the directory's lock, ``common.locks``)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if LEFTOVER.match(p.name)]
    for old in (p for p in found if p.name.endswith(".old")):
        _restore_moved_aside(old)
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return found


def whole_lines(path: str | os.PathLike) -> str:
    """A file's text up to its last newline (a line still being appended, or one a killed write
    left unfinished, is left out); "" when the file is not there."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return text[:text.rfind("\n") + 1]


def atomic_write_text(path: str | os.PathLike, chunks: Iterable[str]) -> None:
    """Write text chunks to ``path`` atomically (UTF-8, fsynced before the rename)."""
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.writelines(chunks)
        handle.flush()
        os.fsync(handle.fileno())


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()
