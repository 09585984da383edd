"""`advrag schedule` finds its background processes by pid file: one caught inside its exec is
still ours. On a loaded machine, one start in thirty read back at once showed a live process
(state R) with an empty ``/proc/<pid>/cmdline``; ``running`` took it for someone else's and
removed its pid file, and the worker ran on untracked (``make test``'s rerun test then found
no worker, and ``unschedule`` left it running)."""

from __future__ import annotations

import threading
from pathlib import Path

from advrag.ops import scheduling


def fake_proc(root: Path, pid: int, state: str, cmdline: bytes) -> Path:
    """A ``/proc/<pid>`` with the two files ``_is_prefect`` reads."""
    proc = root / str(pid)
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(f"{pid} (python) {state} 1 {pid} {pid} 0 -1")
    (proc / "cmdline").write_bytes(cmdline)
    return proc


def test_a_command_line_still_empty_is_read_again_until_the_exec_has_set_it(tmp_path):
    proc = fake_proc(tmp_path, 42, "R", b"")
    timer = threading.Timer(0.1, lambda: (proc / "cmdline").write_bytes(
        b"python\0-m\0prefect\0worker\0start\0"))
    timer.start()
    try:
        assert scheduling._is_prefect(42, proc_root=tmp_path)
    finally:
        timer.cancel()


def test_a_command_line_that_stays_empty_or_names_no_prefect_or_a_zombie_is_not_ours(tmp_path):
    fake_proc(tmp_path, 1, "S", b"")  # a kernel thread's pid, reused: never a command line
    assert not scheduling._is_prefect(1, proc_root=tmp_path, settle_s=0.05)
    fake_proc(tmp_path, 2, "S", b"python\0-m\0pytest\0")
    assert not scheduling._is_prefect(2, proc_root=tmp_path)
    fake_proc(tmp_path, 3, "Z", b"")
    assert not scheduling._is_prefect(3, proc_root=tmp_path)  # at once: a zombie never execs
    assert not scheduling._is_prefect(4, proc_root=tmp_path)  # gone
