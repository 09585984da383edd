"""ARR vs its ablations vs single-agent GRPO at an equal wall-clock training budget.

    python bench/learning/bench_arr_compare.py --minutes 8 --limit 32
    python bench/learning/bench_arr_compare.py --model tiny --minutes 0.01 --limit 2   # smoke run

Each method trains through its real flow (``adversarial_rl`` with configs/arr.yaml,
arr-no-adv.yaml, arr-no-proc.yaml; ``train`` with configs/train.yaml) from its
SFT warm-up, for at most ``--minutes`` of updates (``max_train_minutes``: the
update that spends the budget is the last). The three ARR runs start from one
warm-up (same settings, made once and copied). Then the benchmark flow scores,
on the same held-out questions with bootstrap 95 % intervals: the untrained ARR
dialogue (the base model in both roles), the warmed-up pair, each trained pair,
and the GRPO-trained single agent (Search-R1 protocol). Checkpoints go to a
scratch directory; runs go to the default MLflow store (experiment
``advrag-bench-compare``). Writes ``bench/results/arr_compare.json``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from advrag.config import BenchmarkConfig, load_config
from advrag.flows.benchmark import benchmark
from advrag.flows.rl import rl_flow
from advrag.recipes.arr import ArrConfig
from advrag.recipes.grpo import GrpoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world, tiny_model
from reporting import write_report

ARR_CONFIGS = {"arr": "configs/arr.yaml", "arr-no-adv": "configs/arr-no-adv.yaml",
               "arr-no-proc": "configs/arr-no-proc.yaml"}
EXPERIMENT = "advrag-bench-compare"


def budgeted(config, minutes: float, checkpoints: Path, name: str, model: str | None):
    """The config with the budget, fresh checkpoints, bench registry names and no flow benchmark.

    ``model`` replaces the config's (a tiny model: fp32, room for its longer tokenisation).
    """
    update = {"max_train_minutes": minutes, "checkpoint_dir": checkpoints / name,
              "experiment": EXPERIMENT, "evaluate": None}
    if model is not None:
        update |= {"model": model, "cpu_bf16": False,
                   "optim": config.optim.model_copy(update={"max_seq_len": 4096}),
                   "warmup": config.warmup.model_copy(update={
                       "sft": config.warmup.sft.model_copy(update={"max_seq_len": 4096})})}
    if isinstance(config, ArrConfig):
        update |= {"registered_reasoner": f"bench-{name}-reasoner",
                   "registered_verifier": f"bench-{name}-verifier"}
    else:
        update |= {"registered_model": f"bench-{name}"}
    return config.model_copy(update=update)


def share_warmup(source: Path, config: ArrConfig) -> None:
    """Copy the first ARR run's warm-up to ``config``'s (its settings marker must match)."""
    if source.is_dir() and not (config.checkpoint_dir / "warmup").exists():
        shutil.copytree(source, config.checkpoint_dir / "warmup")


def trained_methods(minutes: float, checkpoints: Path, model: str | None) -> dict[str, dict]:
    """Run every method's flow under the budget; name → flow result plus wall time."""
    results = {}
    for name, path in ARR_CONFIGS.items():
        config = budgeted(load_config(path, ArrConfig), minutes, checkpoints, name, model)
        share_warmup(checkpoints / "arr" / "warmup", config)
        started = time.perf_counter()
        results[name] = rl_flow(config, run_name=f"compare-{name}")
        results[name]["wall_s"] = time.perf_counter() - started
        print(f"{name}: {results[name]['steps_run']} updates in {results[name]['train_s']:.0f} s",
              flush=True)
    config = budgeted(load_config("configs/train.yaml", GrpoConfig), minutes, checkpoints,
                      "grpo", model)
    started = time.perf_counter()
    results["grpo"] = rl_flow(config, run_name="compare-grpo")
    results["grpo"]["wall_s"] = time.perf_counter() - started
    print(f"grpo: {results['grpo']['steps_run']} updates in {results['grpo']['train_s']:.0f} s",
          flush=True)
    return results


def evaluations(results: dict[str, dict], checkpoints: Path, base: str) -> dict[str, tuple]:
    """Row name → (method, BenchmarkConfig changes) for every model to score."""
    rows = {"untrained ARR": ("arr", {"model": base}),
            "warmed-up ARR": ("arr", {"model": str(checkpoints / "arr" / "warmup")})}
    for name in ARR_CONFIGS:
        dirs = results[name]["model_dirs"]
        rows[f"trained {name}"] = ("arr", {"model": dirs["reasoner"],
                                           "verifier_model": dirs["verifier"]})
    rows["trained grpo (single agent)"] = ("search_r1", {"model": results["grpo"]["model_dir"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="training budget per method")
    parser.add_argument("--limit", type=int, default=32, help="held-out questions scored")
    parser.add_argument("--model", choices=["config", "tiny"], default="config",
                        help="the configs' model, or a tiny random one for a smoke run")
    parser.add_argument("--out", type=Path, default=Path("bench/results/arr_compare.json"))
    args = parser.parse_args()
    world = offline_world()
    scratch = Path(tempfile.mkdtemp(prefix="advrag-compare-"))
    try:
        model = str(tiny_model(world, scratch / "tiny")) if args.model == "tiny" else None
        results = trained_methods(args.minutes, scratch, model)
        arr_config = load_config(ARR_CONFIGS["arr"], ArrConfig)
        table = {}
        for row, (method, changes) in evaluations(results, scratch,
                                                  model or arr_config.model).items():
            config = arr_config.evaluate.model_copy(update={
                "methods": [method], "limit": args.limit, "experiment": EXPERIMENT, **changes})
            scored = benchmark(BenchmarkConfig(**config.model_dump()), run_name=row)
            table[row] = {"method": method, **scored["results"][(method, "world")]}
            print(f"{row}: EM {table[row]['em']:.3f} [{table[row]['em_lo']:.3f}, "
                  f"{table[row]['em_hi']:.3f}]  F1 {table[row]['f1']:.3f}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {"command": f"python bench/learning/bench_arr_compare.py --model {args.model} "
                         f"--minutes {args.minutes:g} --limit {args.limit}",
              "budget_minutes": args.minutes,
              "training": {name: {k: r[k] for k in ("steps_run", "train_s", "wall_s", "run_id")}
                           for name, r in results.items()},
              "held_out": table}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
