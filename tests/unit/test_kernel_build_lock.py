"""The bf16 attention kernels' build directory and lock: a build killed midway never leaves
later loads waiting (torch's own lock file would, forever)."""

from __future__ import annotations

import fcntl
import signal
import subprocess
import sys
from pathlib import Path

from advrag.engines.local import attention


def test_a_lock_file_left_by_a_killed_build_is_removed(tmp_path):
    (tmp_path / "lock").write_text("")  # what torch's FileBaton leaves when its build is killed
    with attention.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def locked_now(directory: Path) -> bool:
    """Whether another process holds the build lock on ``directory``."""
    with open(directory / "advrag-build.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_the_lock_is_held_while_building_and_freed_when_the_builder_is_killed(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from advrag.engines.local import attention\n"
         "with attention.build_lock(Path(sys.argv[1])):\n"
         "    print('held', flush=True); time.sleep(120)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert locked_now(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert not locked_now(tmp_path)


def test_each_python_environment_builds_in_a_directory_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "prefix", "/envs/a")
    first = attention.build_directory()
    monkeypatch.setattr(sys, "prefix", "/envs/b")
    second = attention.build_directory()
    assert first.parent == second.parent == tmp_path
    assert first != second and first.is_dir() and second.is_dir()


def test_without_the_variable_the_kernels_build_under_the_advrag_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert attention.build_directory().parent == tmp_path / ".cache/advrag/torch_extensions"
