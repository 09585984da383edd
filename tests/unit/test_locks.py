"""One run per directory across processes: a second process is stopped with the holder named;
the lock goes with its holder, even killed; one process may take it again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from advrag.common.locks import DirectoryBusy, exclusive, lock_path, shared

HOLD = """
import sys, time
from advrag.common import locks
with getattr(locks, sys.argv[2])(sys.argv[1], "the test directory"):
    print("held", flush=True)
    time.sleep(60)
"""


def holder(directory: Path, mode: str = "exclusive") -> subprocess.Popen:
    """Another process holding ``directory`` (``exclusive`` or ``shared``; returns once it
    holds it)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), mode],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_process_is_stopped_naming_the_holder_until_it_dies(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    other = holder(checkpoints)
    try:
        with pytest.raises(DirectoryBusy, match=rf"the checkpoint directory {checkpoints} is in "
                                                rf"use by another run \(pid {other.pid}, since"):
            with exclusive(checkpoints, "the checkpoint directory"):
                pytest.fail("entered a directory another process holds")
    finally:
        os.kill(other.pid, signal.SIGKILL)  # a crash: nothing unlocks explicitly
        other.wait()
    with exclusive(checkpoints, "the checkpoint directory"):
        assert str(os.getpid()) in lock_path(checkpoints).read_text()


def test_the_lock_file_sits_beside_the_directory_and_nothing_inside_changes(tmp_path):
    data = tmp_path / "data"
    with exclusive(data, "the data directory"):
        assert not data.exists() and lock_path(data) == tmp_path / ".data.lock"


def test_one_process_may_take_its_own_lock_again(tmp_path):
    with exclusive(tmp_path / "d", "d"), exclusive(tmp_path / "d", "d"):
        pass
    other = holder(tmp_path / "d")  # released after the outer block: another process may hold it
    other.kill()
    other.wait()


def test_a_held_data_directory_stops_the_data_step_before_it_writes(tmp_path, monkeypatch):
    from advrag.config import DataConfig
    from advrag.flows.prepare_data import prepare_data

    monkeypatch.chdir(tmp_path)
    other = holder(tmp_path / "data")
    try:
        with pytest.raises(DirectoryBusy, match="the data directory"):
            prepare_data.fn(DataConfig(dvc_repro=False))
        assert not (tmp_path / "data").exists()  # no world written under the holder
    finally:
        other.kill()
        other.wait()


def test_readers_share_a_directory_and_a_writer_is_refused_while_any_reads(tmp_path):
    data = tmp_path / "data"
    reader = holder(data, "shared")  # a training run reading data/
    try:
        with shared(data, "the data directory"):  # a benchmark reads beside it
            pass
        with pytest.raises(DirectoryBusy, match=rf"the data directory {data} is in use"):
            with exclusive(data, "the data directory"):  # `advrag world` would rebuild it
                pytest.fail("rebuilt the data under a reader")
    finally:
        reader.kill()
        reader.wait()
    writer = holder(data)
    try:
        with pytest.raises(DirectoryBusy, match=rf"the data directory {data} is in use"):
            with shared(data, "the data directory"):
                pytest.fail("read the data while it was being rebuilt")
    finally:
        writer.kill()
        writer.wait()


def test_the_world_command_rebuilds_data_only_while_no_run_reads_it(tmp_path):
    import json

    from typer.testing import CliRunner

    from advrag.cli import app

    out = tmp_path / "data" / "world"
    args = ["world", "--out", str(out), "--n-train", "4", "--n-dev", "2", "--n-test", "2"]
    reader = holder(tmp_path / "data", "shared")  # an RL run or a benchmark reading data/
    try:
        refused = CliRunner().invoke(app, args)
        assert isinstance(refused.exception, DirectoryBusy) and not out.exists()
    finally:
        reader.kill()
        reader.wait()
    assert CliRunner().invoke(app, args).exit_code == 0
    config = json.loads((out / "world.json").read_text())["config"]
    assert config["passage_words"] == 60  # the one world every record uses
