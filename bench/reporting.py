"""Where a benchmark's numbers go: one JSON file under bench/results/, echoed to stdout."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_report(path: Path, report: dict) -> None:
    """Add the 1-minute load average (shared cores slow every run), write ``path``, print it."""
    report = report | {"load_average_1m_at_end": os.getloadavg()[0]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
