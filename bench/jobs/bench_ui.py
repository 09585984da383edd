"""Start times of the two servers `make ui` runs (MLflow and Prefect, started together).

    python bench/jobs/bench_ui.py [--repeats 3] [--out bench/results/ui.json]

Each repeat starts both servers through `advrag.ops.ui` (the code `advrag ui` runs)
on fresh stores in a tmp dir ("cold": MLflow creates its SQLite schema, Prefect
migrates its database) and then again on the same stores ("warm", as on a
second `make ui`). A start time is launch → first 200 from the health endpoint.
The 1-minute load average is recorded with each repeat: on shared cores it
explains most of the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
from pathlib import Path

from advrag.ops import ui


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_times(root: Path) -> dict[str, float]:
    """Start both servers on the stores under ``root``; seconds until each answered."""
    specs = [ui.mlflow_spec(root / "mlflow" / "mlflow.db", root / "mlflow" / "artifacts", free_port()),
             ui.prefect_spec(root / "prefect", free_port())]
    with ui.running(specs) as servers:
        return {s.spec.name: s.start_s for s in servers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/ui.json"))
    args = parser.parse_args()
    rows = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="advrag-ui-bench-") as tmp:
            (Path(tmp) / "mlflow").mkdir()
            for state in ("cold", "warm"):
                rows.append({"state": state, "load_avg_1m": os.getloadavg()[0], **start_times(Path(tmp))})
    summary = {f"{state}_{name}_median_s": statistics.median(r[name] for r in rows if r["state"] == state)
               for state in ("cold", "warm") for name in ("MLflow", "Prefect")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": rows, **summary}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
