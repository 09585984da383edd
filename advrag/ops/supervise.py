"""Keep one background command running: restart it when it exits, until told to stop.

    python -m advrag.ops.supervise [--min-delay 2] [--max-delay 60] -- COMMAND [ARG ...]

`advrag schedule` runs its Prefect worker under this. A worker whose server stalls (SQLite's
"database is locked" on a loaded machine, refused connections) gives up after its error
threshold and exits; nothing else would start it again, and the nights after would not run.
Each restart is logged with the exit code that caused it. The wait before a restart doubles
from ``--min-delay`` to ``--max-delay`` seconds while the command keeps failing fast, and falls
back to ``--min-delay`` once it has lived longer than ``--max-delay``. SIGTERM or SIGINT stops
the command (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``) and the supervisor.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time

STOP_TIMEOUT_S = 20.0


def next_delay(delay: float, lived_s: float, min_delay: float, max_delay: float) -> float:
    """The wait before the next restart: doubled after a fast failure, reset after a long life."""
    return min_delay if lived_s > max_delay else min(max(delay * 2, min_delay), max_delay)


def supervise(command: list[str], min_delay: float, max_delay: float,
              stopping: threading.Event) -> int:
    """Run ``command`` again each time it exits, until ``stopping`` is set; the last exit code."""
    delay, code = 0.0, 0
    while not stopping.is_set():
        started = time.monotonic()
        child = subprocess.Popen(command)
        while child.poll() is None:
            if stopping.wait(0.2):
                return stop_child(child)
        code, lived_s = child.returncode, time.monotonic() - started
        delay = next_delay(delay, lived_s, min_delay, max_delay)
        print(f"advrag supervise: {command[0]} exited with code {code} after {lived_s:.0f} s; "
              f"restarting in {delay:.0f} s", file=sys.stderr, flush=True)
        stopping.wait(delay)
    return code


def stop_child(child: subprocess.Popen) -> int:
    """SIGTERM ``child``, SIGKILL it if it outlives ``STOP_TIMEOUT_S``; its exit code."""
    child.terminate()
    try:
        return child.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-delay", type=float, default=2.0)
    parser.add_argument("--max-delay", type=float, default=60.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to supervise: give it after --")
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    supervise(command, args.min_delay, args.max_delay, stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
