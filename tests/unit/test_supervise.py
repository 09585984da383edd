"""``advrag.ops.supervise`` keeps a command running: real child processes, short delays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from advrag.ops.supervise import next_delay, supervise


def test_the_wait_doubles_while_the_command_fails_fast_and_resets_after_a_long_life():
    assert next_delay(0.0, lived_s=1, min_delay=2, max_delay=60) == 2
    assert next_delay(2.0, lived_s=1, min_delay=2, max_delay=60) == 4
    assert next_delay(32.0, lived_s=1, min_delay=2, max_delay=60) == 60
    assert next_delay(60.0, lived_s=61, min_delay=2, max_delay=60) == 2


def test_a_command_that_exits_is_started_again_until_the_supervisor_stops(tmp_path):
    starts = tmp_path / "starts"
    command = [sys.executable, "-c",
               f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"]
    stopping = threading.Event()
    thread = threading.Thread(target=lambda: supervise(command, 0.05, 0.1, stopping))
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(starts.read_text() if starts.exists() else "") < 3:
        time.sleep(0.05)
    stopping.set()
    thread.join(10)
    assert not thread.is_alive()
    count = len(starts.read_text())
    assert count >= 3
    time.sleep(0.3)
    assert len(starts.read_text()) == count  # stopped: no start after it


def test_sigterm_stops_the_supervisor_and_its_running_command(tmp_path):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-m", "advrag.ops.supervise", "--", sys.executable,
                             "-c", child], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    with pytest.raises(ProcessLookupError):  # the child was reaped by the supervisor
        os.kill(worker, 0)
    assert "restarting" not in proc.stderr.read()


def test_no_command_is_refused_with_the_fix():
    proc = subprocess.run([sys.executable, "-m", "advrag.ops.supervise", "--"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "give it after --" in proc.stderr
