"""Where the benchmark scripts live, and how a test imports one as the script itself would."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def on_path(monkeypatch, folder: str) -> None:
    """``bench/`` (the shared modules) and ``bench/<folder>`` (a script's siblings) importable,
    as when a script runs; monkeypatch restores ``sys.path`` after the test."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH / folder))
