"""Learning benchmark: held-out EM/F1 of the base, warmed-up and GRPO-trained policy.

    python bench/learning/bench_learning.py [--config configs/train.yaml] [--steps N] [--fresh]

Runs the real ``train`` flow (SFT warm-up → N GRPO updates → benchmark of the
three models on the world's test split, bootstrap 95 % intervals) and writes
the numbers with the wall time of each phase to ``bench/results/learning.json``.
``--fresh`` deletes the config's checkpoint directory first, so the warm-up and
every update are timed instead of resumed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from advrag.config import load_config
from advrag.flows.rl import rl_flow
from advrag.recipes.grpo import GrpoConfig
from advrag.tasks import tracking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world


def phase_seconds(run_id: str) -> dict[str, float]:
    """Summed per-step seconds of the GRPO phases, read back from the MLflow run."""
    client = tracking.client()
    totals = {}
    for key in ("rollout_s", "score_s", "update_s"):
        totals[key] = sum(m.value for m in client.get_metric_history(run_id, key))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/learning.json"))
    args = parser.parse_args()
    offline_world()
    config = load_config(args.config, GrpoConfig)
    if args.steps is not None:
        config = config.model_copy(update={"steps": args.steps})
    if args.fresh:
        shutil.rmtree(config.checkpoint_dir, ignore_errors=True)
    started = time.perf_counter()
    result = rl_flow(config, run_name="learning-bench")
    wall = time.perf_counter() - started
    models = {name: {f"{m}/{d}": s for (m, d), s in result[name].items()}
              for name in ("base", "warmup", "trained") if name in result}
    report = {"config": args.config, "steps": config.steps, "wall_s": wall,
              "grpo_phases_s": phase_seconds(result["run_id"]), "run_id": result["run_id"],
              "models": models}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
