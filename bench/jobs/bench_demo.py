"""Wall time, peak memory and the table of the demo job (what `make demo` runs after installing).

    python bench/jobs/bench_demo.py [--repeats 1] [--config configs/pipeline-demo.yaml] [--fresh]

Runs `advrag pipeline` on the config. ``--fresh`` deletes the generated stores
first (processed/, .mlflow/, .cache/advrag/ but the converted model), so the DVC
stages, the MLflow schema migration, the warm-up and every stage are included,
as on a first run.
Peak memory is the largest resident set of the demo process or any process it
waited for (DVC stage commands included). The numbers behind the pipeline's table (its
``pipeline.json`` in MLflow) go into the report too: the README's demo table is generated from
them (``python bench/results_tables.py --readme``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

from advrag.config import PipelineConfig, load_config


def run_once(config: str, fresh: bool) -> float:
    """One demo run in a subprocess; returns its wall time in seconds."""
    if fresh:
        for path in ("processed", ".mlflow", ".cache/advrag/checkpoints", ".cache/advrag/pipeline",
                     ".cache/advrag/curation", ".cache/advrag/predictions"):
            shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "advrag.cli", "pipeline", "--config", config], check=True)
    return time.perf_counter() - start


def last_pipeline(experiment: str) -> dict:
    """The numbers behind the table of the newest pipeline run of ``experiment`` in the project's
    MLflow store (its ``pipeline.json``): what the README's demo table is generated from."""
    from advrag.tasks import tracking

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    tracking.configure()
    client = tracking.client()
    found = client.get_experiment_by_name(experiment)
    newest = client.search_runs([found.experiment_id], "attributes.run_name = 'pipeline'",
                                order_by=["attributes.start_time DESC"], max_results=1)[0]
    path = client.download_artifacts(newest.info.run_id, "pipeline.json", tempfile.mkdtemp())
    return json.loads(Path(path).read_text())


def demo_allocator() -> str:
    """The allocator the demo's `advrag` process runs on, which re-executes itself with tcmalloc
    where installed (the report's ``allocator`` is this script's own)."""
    from advrag.common.allocator import find_tcmalloc, preload_environment

    environ = preload_environment(os.environ, find_tcmalloc()) or os.environ
    return "tcmalloc" if "libtcmalloc" in environ.get("LD_PRELOAD", "") else "system"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/pipeline-demo.yaml")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/demo.json"))
    args = parser.parse_args()
    walls = [run_once(args.config, args.fresh) for _ in range(args.repeats)]
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    result = {
        "config": args.config,
        "wall_s": walls,
        "median_wall_s": statistics.median(walls),
        "peak_rss_gib": peak_gib,
        "fresh": args.fresh,
        "demo_allocator": demo_allocator(),
        "pipeline": last_pipeline(load_config(args.config, PipelineConfig).experiment),
    }
    write_report(args.out, result)
    print(
        f"demo: median wall {result['median_wall_s']:.0f} s over {args.repeats} run(s), "
        f"peak RSS {peak_gib:.2f} GiB (fresh={args.fresh})"
    )


if __name__ == "__main__":
    main()
