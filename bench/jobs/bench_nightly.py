"""Wall time of the nightly flow on the tiny config, Prefect's share of it, server start times.

    python bench/jobs/bench_nightly.py [--config configs/nightly-tiny.yaml] [--nights 2]
    python bench/jobs/bench_nightly.py --config configs/nightly.yaml --model config  # SmolLM2, > 1 h

Runs in a throwaway git+DVC project (the repo's dvc.yaml/params.yaml) against a
real local Prefect server started the way `advrag schedule` starts it (its
cold start on a fresh database and its warm restart are timed too). The tiny
policy (the default; `--model config` keeps the config's model) is built from
the generated world's corpus. Night 1 does everything
(world, gate, DVC stages, warm-up, discriminator SFT, one GAR update, benchmark,
promotion gates); later nights see unchanged data (no-op `dvc repro`, the discriminator
SFT and RL stages skipped).

Prefect's share is given two ways: an upper bound, wall time minus the summed
run time of all task runs (it also counts flow-body code such as MLflow run
creation), and an estimate: the night's task and subflow counts times the cost
of a no-op task and a no-op subflow, plus one no-op flow run, on the same server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_project(root: Path) -> Path:
    """git + DVC repo with the project's stage definitions (stage deps name source files)."""
    from advrag.ops import dataplane

    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dataplane.run_dvc(["init", "-q"], root)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "advrag", root / "advrag")
    return root


def start_server(home: Path, port: int) -> float:
    """Seconds from the start of the Prefect server (as `advrag schedule` starts it) to a
    healthy API."""
    from advrag.ops import scheduling

    start = time.perf_counter()
    scheduling.start_background(home, "server", scheduling.server_command(port),
                                scheduling.prefect_env(home, port), home)
    scheduling.wait_healthy(scheduling.api_url(port), 300, home)
    return time.perf_counter() - start


def tiny_policy(config_path: Path, out: Path) -> Path:
    """The tiny random Llama, its tokenizer trained on the world the config generates."""
    from advrag.config import PipelineConfig, load_config
    from advrag.datasets.world import generate_world, write_world
    from advrag.models.tiny import build_tiny_policy

    section = load_config(config_path, PipelineConfig).data.world
    world_dir = out.parent / "world-for-tokenizer"
    write_world(generate_world(section.world_config()), world_dir)
    texts = [json.loads(line)["contents"] for line in (world_dir / "corpus.jsonl").open()]
    return build_tiny_policy(out, texts)


def relocated(config, work: Path, model: Path | None):
    """``config`` with its recipe and discriminator files rewritten under ``work``: their
    checkpoints there too, and ``model`` (if given) as both files' model."""
    import yaml

    from advrag.config import load_config
    from advrag.recipes import recipe_for
    from advrag.recipes.gar import DiscriminatorSFTConfig

    files = {"recipe": recipe_for(ROOT / config.recipe).config,
             "discriminator": load_config(ROOT / config.discriminator, DiscriminatorSFTConfig)}
    for key, settings in files.items():
        update = {"checkpoint_dir": str(work / f"ckpt-{key}")} | ({"model": str(model)} if model else {})
        path = work / f"{key}.yaml"
        path.write_text(yaml.safe_dump(settings.model_dump(mode="json") | update))
        config = config.model_copy(update={key: path})
    return config


def runs_since(since: float) -> tuple[list, list]:
    """Task runs and flow runs that started after ``since`` (epoch seconds)."""
    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterStartTime,
        TaskRunFilter,
        TaskRunFilterStartTime,
    )

    after = datetime.fromtimestamp(since, timezone.utc)
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(task_run_filter=TaskRunFilter(
            start_time=TaskRunFilterStartTime(after_=after)), limit=200)
        flows = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            start_time=FlowRunFilterStartTime(after_=after)), limit=200)
    return tasks, flows


def noop_costs(n_tasks: int = 100, n_subflows: int = 10) -> dict[str, float]:
    """Per-call cost of a no-op task and a no-op subflow (timed inside their parent flow), and
    of a top-level no-op flow run, on this server."""
    from prefect import flow, task

    @task
    def noop_task(i: int) -> int:
        return i

    @flow
    def noop_subflow() -> None:
        return None

    @flow
    def per_task() -> float:
        start = time.perf_counter()
        for i in range(n_tasks):
            noop_task(i)
        return (time.perf_counter() - start) / n_tasks

    @flow
    def per_subflow() -> float:
        start = time.perf_counter()
        for _ in range(n_subflows):
            noop_subflow()
        return (time.perf_counter() - start) / n_subflows

    @flow
    def empty() -> None:
        return None

    empty()  # warm-up: imports, flow registration
    start = time.perf_counter()
    empty()
    return {"flow_run_s": time.perf_counter() - start, "task_s": per_task(),
            "subflow_s": per_subflow()}


def night(config, label: str) -> dict:
    """One nightly run: wall time, summed task time, task and flow-run counts."""
    from advrag.flows.nightly import nightly

    since = time.time()
    start = time.perf_counter()
    result = nightly(config)
    wall = time.perf_counter() - start
    tasks, flows = runs_since(since - 1)
    subflow_slots = {f.parent_task_run_id for f in flows}  # a subflow also shows as a task run
    tasks = [t for t in tasks if t.id not in subflow_slots]
    task_s = sum(t.total_run_time.total_seconds() for t in tasks)
    return {"night": label, "wall_s": wall, "task_run_time_s": task_s,
            "n_task_runs": len(tasks), "n_flow_runs": len(flows),
            "slowest_tasks": slowest_tasks(tasks),
            "cached_tasks": sorted(t.name.rsplit("-", 1)[0] for t in tasks
                                   if t.state and t.state.name == "Cached"),
            "alias": result["decision"]["alias"], "version": result["decision"]["version"]}


def slowest_tasks(tasks: list, top: int = 5) -> dict[str, dict]:
    """The ``top`` tasks by summed run time, over all runs of each (e.g. every train_step)."""
    totals: dict[str, list[float]] = {}
    for t in tasks:
        totals.setdefault(t.name.rsplit("-", 1)[0], []).append(t.total_run_time.total_seconds())
    ranked = sorted(totals.items(), key=lambda item: -sum(item[1]))[:top]
    return {name: {"total_s": round(sum(times), 1), "runs": len(times)} for name, times in ranked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/nightly-tiny.yaml")
    parser.add_argument("--nights", type=int, default=2)
    parser.add_argument("--model", choices=["tiny", "config"], default="tiny",
                        help="train a tiny random model (CI-sized) or the config's own model")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/nightly.json")
    args = parser.parse_args()
    args.config, args.out = args.config.resolve(), args.out.resolve()  # the nights run elsewhere
    work = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    home, port = work / "prefect", free_port()
    home.mkdir()
    for key, value in {"PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
                       "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow/mlflow.db",
                       "DO_NOT_TRACK": "1",
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1",
                       "MLFLOW_DISABLE_TELEMETRY": "true", "DVC_NO_ANALYTICS": "1"}.items():
        os.environ[key] = value
    from advrag.config import PipelineConfig, load_config
    from advrag.ops import scheduling

    try:
        server = {"cold_start_s": start_server(home, port)}
        scheduling.stop(home, "server", 30)
        server["warm_restart_s"] = start_server(home, port)
        project = make_project(work / "project")
        config = load_config(args.config, PipelineConfig)
        model = tiny_policy(args.config, work / "tiny-policy") if args.model == "tiny" else None
        config = relocated(config, work, model)
        os.chdir(project)
        nights = [night(config, "first" if i == 0 else "unchanged data") for i in range(args.nights)]
        costs = noop_costs()
    finally:
        scheduling.stop(home, "server", 30)
    for n in nights:
        n["prefect_share_upper_bound"] = (n["wall_s"] - n["task_run_time_s"]) / n["wall_s"]
        estimate = (costs["flow_run_s"] + (n["n_flow_runs"] - 1) * costs["subflow_s"]
                    + n["n_task_runs"] * costs["task_s"])
        n["prefect_share_estimate"] = estimate / n["wall_s"]
    result = {"config": str(args.config.relative_to(ROOT)), "server": server, "nights": nights,
              "noop_costs": costs, "load_average_1m_at_end": os.getloadavg()[0],
              "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"server: cold start {server['cold_start_s']:.1f} s, warm restart {server['warm_restart_s']:.1f} s")
    for n in nights:
        print(f"night ({n['night']}): wall {n['wall_s']:.1f} s, tasks {n['task_run_time_s']:.1f} s "
              f"in {n['n_task_runs']} task runs / {n['n_flow_runs']} flow runs; Prefect share "
              f"≤ {n['prefect_share_upper_bound']:.0%}, ≈ {n['prefect_share_estimate']:.0%}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
