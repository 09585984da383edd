"""The process's memory allocator: tcmalloc where the machine has it, else the C library's malloc.

Measured side by side on this project's updates and sampling
(``bench/runtime/bench_allocator.py``; docs/performance.md), tcmalloc ran the update
1.25× faster with up to 1.7 GiB less peak memory, and sampling 1.13× faster;
glibc's malloc told to keep its freed memory did not close the gap.

An allocator has to be in place before the process starts, so the command-line
entry points call :func:`use_tcmalloc`, which re-executes the same command once
with tcmalloc in ``LD_PRELOAD`` (Debian: ``apt-get install libtcmalloc-minimal4``;
``make install`` tries that). Child processes — the vLLM engine, Prefect's
worker and flow runs — inherit it. ``ADVRAG_ALLOCATOR`` picks: ``auto`` (the
default: tcmalloc when installed), ``tcmalloc`` (required: an error when it is
missing) or ``system`` (never preload).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

ALLOCATOR_ENV = "ADVRAG_ALLOCATOR"
CHOICES = ("auto", "tcmalloc", "system")
TCMALLOC_FILES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                "/usr/lib", "/usr/local/lib")
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install libtcmalloc-minimal4)"


def find_tcmalloc(dirs: tuple[str, ...] = LIBRARY_DIRS) -> str | None:
    """The path of an installed tcmalloc shared library, or None."""
    for directory in dirs:
        for name in TCMALLOC_FILES:
            if (Path(directory) / name).is_file():
                return str(Path(directory) / name)
    return None


def preload_environment(environ: Mapping[str, str], tcmalloc: str | None) -> dict[str, str] | None:
    """The environment to re-execute under with ``tcmalloc`` preloaded, or None to run as is.

    None when ``$ADVRAG_ALLOCATOR`` is ``system``, when tcmalloc is already in
    ``LD_PRELOAD`` (so the re-executed process never loops), or when ``auto``
    finds none. Raises ``ValueError`` for an unknown choice, or for ``tcmalloc``
    asked for but not installed.
    """
    choice = environ.get(ALLOCATOR_ENV, "auto").strip() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"${ALLOCATOR_ENV}={choice!r} is not one of {', '.join(CHOICES)}")
    preloaded = environ.get("LD_PRELOAD", "")
    if choice == "system" or "libtcmalloc" in preloaded:
        return None
    if tcmalloc is None:
        if choice == "tcmalloc":
            raise ValueError(f"${ALLOCATOR_ENV}=tcmalloc, but no tcmalloc library is installed: "
                             f"{INSTALL_HINT}, or set {ALLOCATOR_ENV}=auto")
        return None
    return {**environ, "LD_PRELOAD": ":".join(filter(None, (tcmalloc, preloaded)))}


def use_tcmalloc() -> None:
    """Re-execute this process's command with tcmalloc preloaded, unless nothing is to change.

    Call it first thing in a ``main``, before threads or open work: ``exec``
    replaces the process (same pid, arguments and open files).
    """
    environ = preload_environment(os.environ, find_tcmalloc())
    if environ is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)


def allocator_in_use(maps: Path = Path("/proc/self/maps")) -> str:
    """``"tcmalloc"`` when this process has it mapped, else ``"system"`` (recorded with each run)."""
    try:
        return "tcmalloc" if "libtcmalloc" in maps.read_text() else "system"
    except OSError:
        return "system"
