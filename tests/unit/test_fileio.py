"""Atomic writes: durable (fsynced before and after the rename), and what a SIGKILL leaves
behind is cleared by the next run, nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from advrag.common import fileio
from advrag.common.fileio import atomic_dir, atomic_file, remove_leftovers


class FsyncLog:
    """What ``os.fsync`` was called on (the real call still runs)."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(fileio.os, "fsync", fsync)


def test_a_file_and_its_directory_reach_the_disk_before_it_is_done(tmp_path, monkeypatch):
    log = FsyncLog(monkeypatch)
    with atomic_file(tmp_path / "out.json") as tmp:
        tmp.write_text("{}")
        temp_name = str(tmp)
    assert log.paths == [temp_name, str(tmp_path)]  # the content, then the rename
    assert (tmp_path / "out.json").read_text() == "{}"


def test_a_directory_reaches_the_disk_file_by_file_then_its_parent(tmp_path, monkeypatch):
    log = FsyncLog(monkeypatch)
    with atomic_dir(tmp_path / "step-00000002") as tmp:
        (tmp / "weights").mkdir()
        (tmp / "weights" / "model.safetensors").write_bytes(b"w")
        (tmp / "state.json").write_text("{}")
        temp = str(tmp)
    assert log.paths == [f"{temp}/weights/model.safetensors", f"{temp}/weights",  # bottom up
                         f"{temp}/state.json", temp, str(tmp_path)]  # then the rename


KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from advrag.common.fileio import atomic_dir, atomic_file
root = Path(sys.argv[1])
with atomic_file(root / "data.json") as tmp:
    tmp.write_text("half")
    with atomic_dir(root / "step-00000004") as d:
        (d / "state.json").write_text("half")
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writers_leftovers_are_cleared_and_nothing_else(tmp_path):
    (tmp_path / "step-00000002").mkdir()
    (tmp_path / ".keep").write_text("a user's hidden file")
    (tmp_path / "notes.tmp").write_text("not ours: no leading dot")
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)], check=False)
    assert killed.returncode == -signal.SIGKILL
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert len(left) == 3 and left[-1] == "notes.tmp"  # the file's and the directory's temps
    removed = remove_leftovers(tmp_path)
    assert sorted(p.name for p in removed) == left[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", "notes.tmp", "step-00000002"]
    assert remove_leftovers(tmp_path / "absent") == []


KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from advrag.common.fileio import atomic_dir
root = Path(sys.argv[1])
replace, calls = os.replace, []
def dying(src, dst):  # the second rename (the new copy into place) never happens
    calls.append(dst)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    replace(src, dst)
os.replace = dying
with atomic_dir(root / "index") as d:
    (d / "vectors.bin").write_text("new")
"""


def test_a_kill_between_the_renames_gives_the_previous_copy_back(tmp_path):
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "vectors.bin").write_text("old")
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(tmp_path)],
                            check=False)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "index").exists()  # moved aside, the new copy not yet in place
    removed = remove_leftovers(tmp_path)
    assert sorted(p.suffix for p in removed) == [".old", ".tmp"]
    assert (tmp_path / "index" / "vectors.bin").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_names_the_helpers_give_are_the_ones_cleared():
    for name in (".step-00000004.ab_9xk2q.tmp", ".data.json.x1y2z3.tmp", ".index.k9_3.old"):
        assert fileio.LEFTOVER.match(name), name
    for name in (".keep", "step-00000004", "notes.tmp", ".tmp", ".data.lock"):
        assert not fileio.LEFTOVER.match(name), name


def test_whole_lines_leave_out_a_line_being_written(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert fileio.whole_lines(path) == ""
    path.write_text('{"a": "é"}\n{"b": 2}\n{"c"')
    assert fileio.whole_lines(path) == '{"a": "é"}\n{"b": 2}\n'
    path.write_text('{"c"')
    assert fileio.whole_lines(path) == ""


def test_kept_rows_cut_an_unfinished_last_line_off_the_file_and_only_then(tmp_path):
    from advrag.tasks.discriminator import kept_rows

    cache = tmp_path / "new" / "rollouts.jsonl"
    assert kept_rows(cache) == [] and cache.parent.is_dir()
    cache.write_text('{"q": "é"}\n{"q": 2}\n')
    before = cache.stat().st_mtime_ns, cache.stat().st_ino
    assert kept_rows(cache) == [{"q": "é"}, {"q": 2}]
    assert (cache.stat().st_mtime_ns, cache.stat().st_ino) == before  # whole: not rewritten
    cache.write_text('{"q": "é"}\n{"q": 2}\n{"q": 3')
    assert kept_rows(cache) == [{"q": "é"}, {"q": 2}]
    assert cache.read_text() == '{"q": "é"}\n{"q": 2}\n'
