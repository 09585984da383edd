"""The terminal of the main job: its stages, one progress bar each, the result, where to look.

`advrag pipeline` and `advrag demo` run inside :func:`session`. From its start, whatever the
process and the processes it starts write to stdout or stderr goes to a log file under
``.cache/advrag/logs/``: Prefect's and MLflow's logs, Great Expectations' "Created temporary
directory" lines, transformers' warnings and weight-loading bars, vLLM's logs, C++ warnings.
The redirection is of the file descriptors 1 and 2, not of ``sys.stdout``: libraries that
hold their own reference to a stream (a logging handler made at import) and child processes
follow it too. The terminal then shows only what this module draws there: the progress bar
each stage opens with :func:`progress`, counting what a user counts (questions,
demonstrations, slices, updates), and the lines the command :meth:`Session.say`s. An error
reaches the terminal as its message and the log's path; its traceback is in the log.
A command's session keeps the log until the process exits (``until_exit``), so what the
libraries print on their way out goes there too.

Without a session (tests, the other commands) :func:`progress` draws on stderr when that is
a terminal, as tqdm does, and nothing is redirected.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

LOG_DIR = Path(".cache/advrag/logs")
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' and the hub's bars, read at their import
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
# Loggers whose INFO lines are noise even in the log; their own module may raise their level at
# import, so a filter keeps them quiet: Great Expectations' "Created temporary directory ...
# for ephemeral docs site", once per validated file.
QUIET_LOGGERS = ("great_expectations.data_context.types.base",)
BAR_FORMAT = "{desc:<26}{bar:20} {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"

_terminal: TextIO | None = None  # the session's terminal (its stderr side), where bars draw


@dataclass(frozen=True)
class Session:
    """A running session: its log file and the terminal's two streams."""

    log_path: Path
    out: TextIO
    err: TextIO

    def say(self, text: str) -> None:
        """Print ``text`` on the terminal (its stdout)."""
        print(text, file=self.out, flush=True)


@contextmanager
def session(name: str, log_dir: Path | None = None, until_exit: bool = False
            ) -> Iterator[Session]:
    """Send the process's stdout and stderr to ``<log_dir>/<name>-<time>.log`` for the block
    (module docstring); bars and :meth:`Session.say` reach the terminal.

    ``until_exit``: leave stdout and stderr on the log after the block, for a command whose
    last act it is: what libraries print while the process exits (Prefect sending its last
    logs to its API server, then stopping that server) goes there too. An exception in the
    block: its traceback to the log, ``error: <message>`` and the log's path to the terminal,
    then ``SystemExit(1)``; Ctrl-C: the log's path, then the ``KeyboardInterrupt``.
    """
    global _terminal
    log_path = new_log_path(log_dir or LOG_DIR, name)
    with (open(log_path, "a", buffering=1, encoding="utf-8") as log,
          std_fds_to(log, hand_back=not until_exit) as (out, err)):
        current, _terminal = Session(log_path, out, err), err
        quiet_third_parties()
        try:
            yield current
        except KeyboardInterrupt:
            print(f"interrupted; the whole log: {log_path}", file=err, flush=True)
            raise
        except Exception as error:
            traceback.print_exc()
            print(f"error: {type(error).__name__}: {error}\nthe whole log: {log_path}",
                  file=err, flush=True)
            raise SystemExit(1) from None
        finally:
            _terminal = None


def new_log_path(log_dir: Path, name: str) -> Path:
    """``log_dir/<name>-<YYYYmmdd-HHMMSS>.log`` (the directory made if missing)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log"


@contextmanager
def std_fds_to(log: TextIO, hand_back: bool = True) -> Iterator[tuple[TextIO, TextIO]]:
    """Point file descriptors 1 and 2 at ``log`` for the block (and after it, unless
    ``hand_back``); yield text streams on what they pointed at before (the terminal), in the
    terminal's encoding."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    encoding = sys.__stderr__.encoding if sys.__stderr__ else "utf-8"
    terminal = [open(saved[fd], "w", buffering=1, encoding=encoding, errors="replace")
                for fd in (1, 2)]
    for fd in (1, 2):
        os.dup2(log.fileno(), fd)
    try:
        yield terminal[0], terminal[1]
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if hand_back:
            for fd, stream in zip((1, 2), terminal):
                os.dup2(stream.fileno(), fd)
        for stream in terminal:
            stream.close()


def quiet_third_parties() -> None:
    """Fewer lines in the log: no weight-loading bars, no advisory warnings, nothing under
    WARNING from ``QUIET_LOGGERS``; Python warnings logged (with a time) instead of printed."""
    os.environ.update(QUIET_ENV)
    if "transformers" in sys.modules:  # imported already: its bars were switched on then
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if warnings_and_up not in logger.filters:
            logger.addFilter(warnings_and_up)
    logging.captureWarnings(True)


def warnings_and_up(record: logging.LogRecord) -> bool:
    """A logging filter: WARNING and above pass."""
    return record.levelno >= logging.WARNING


def progress(label: str, total: int, unit: str, initial: int = 0) -> tqdm:
    """A stage's progress bar: ``initial`` of ``total`` ``unit`` done (questions,
    demonstrations, slices, updates). It draws on the session's terminal, else on stderr.
    Where that is a file (a background run's log), the bar is a line at the start, one every
    ``LOG_INTERVAL_S`` and one at the end, so a log shows how far a long stage is.
    A context manager (or ``close()`` it)."""
    stream = _terminal or sys.stderr
    interactive = stream.isatty()
    return tqdm(total=total, initial=initial, desc=label, unit=unit,
                file=stream if interactive else LineStream(stream), bar_format=BAR_FORMAT,
                disable=False, mininterval=0.5 if interactive else LOG_INTERVAL_S,
                maxinterval=LOG_INTERVAL_S, dynamic_ncols=interactive)


LOG_INTERVAL_S = 60.0
"""How often a bar writes a line into a log file."""


class LineStream:
    """A file as tqdm's stream: each redraw (tqdm's carriage return, then the bar) becomes a
    line of its own instead of one ever-longer line of overwritten bars; a redraw that changed
    nothing (the closing one, after the last update's) is not written again."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.last = stream, ""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line and line != self.last:
            self.stream.write(line + "\n")
            self.last = line

    def flush(self) -> None:
        self.stream.flush()


