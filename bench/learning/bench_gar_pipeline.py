"""GAR at pipeline scale: `configs/pipeline.yaml` end to end, one run per seed; warm-up vs trained.

    python bench/learning/bench_gar_pipeline.py [--config configs/pipeline.yaml] [--seeds 0 1]

The protocol (declared in docs/gar-experiments.md before any run):

1. **Each seed** runs the whole pipeline of ``--config`` (its world, warm-up, slice labelling and
   discriminator SFT, joint GAR RL, the benchmark of base, warm-up and trained reasoner, the
   promotion gates) with every seed of its configs set to the seed: the RL and warm-up seeds
   (``optim.seed``, which the discriminator's RL inherits, and ``warmup.sft.seed``) and the
   discriminator SFT's (``seed``: its corruptions and held-out split; ``sft.seed``). Nothing
   else changes.
2. **Held-out questions**: the pipeline's own benchmark (greedy Search-R1 on the first
   ``evaluate.limit`` test questions), read per question from the benchmark runs' predictions.
3. **The test**: per question, warm-up and trained F1 averaged over the seeds; the 95 % paired
   bootstrap interval of trained − warm-up (all questions, and per question kind); the same per
   seed. The discriminator per seed on its held-out slices: accuracy, F1 and malformed verdicts
   of its written verdicts, AUROC of P(yes). The RL run's R_m, R_s, R_d, R_a per update.

Each seed's pipeline runs in a child process inside a scratch checkout: a git worktree of HEAD
at ``<cache-dir>/project``, where the pipeline rebuilds the config's world, runs `dvc repro` and
keeps its MLflow store, so this checkout's ``data/``, ``dvc.lock`` and store stay as they are.
The code and configs are this checkout's. The child writes ``<cache-dir>/seed<N>.json``; a rerun
reuses finished seeds, and an interrupted one resumes from the pipeline's stage cache and
checkpoints. Writes ``--out`` (``bench/results/gar-pipeline.json``) with ``_rows.jsonl`` (each
policy's score per held-out question) and ``_curves.png`` (the four reward terms) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from advrag.core.metrics import bootstrap_ci

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from bench_rex_rag import paired
from bench_ur2 import write_rows
from reporting import child_json, write_report

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("warmup", "trained")
REWARDS = {"R_m": "reasoner/answer_score", "R_s": "reasoner/slice_score",
           "R_d": "discriminator/R_d", "R_a": "discriminator/R_a"}
ROW_KEYS = ("id", "kind", "em", "f1", "n_searches", "format_errors")
CHILD_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
             "MLFLOW_DISABLE_TELEMETRY": "true", "DVC_NO_ANALYTICS": "1",
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "TOKENIZERS_PARALLELISM": "false"}


def seed_configs(config: Path, seed: int, out: Path) -> Path:
    """``out/{gar,discriminator,pipeline}.yaml``: ``config`` and the configs it names, each
    extended with every seed set to ``seed`` and the run's own experiment and model names."""
    pipeline = yaml.safe_load(config.read_text())
    out.mkdir(parents=True, exist_ok=True)
    names = f"advrag-bench-gar-seed{seed}"
    recipe = {"extends": str((ROOT / pipeline["recipe"]).resolve()),
              "optim": {"seed": seed}, "warmup": {"sft": {"seed": seed}},
              "registered_reasoner": f"{names}-reasoner",
              "registered_discriminator": f"{names}-discriminator"}
    judge = {"extends": str((ROOT / pipeline["discriminator"]).resolve()), "seed": seed,
             "sft": {"seed": seed}, "registered_model": f"{names}-judge"}
    run = {"extends": str(config.resolve()), "recipe": str(out / "gar.yaml"),
           "discriminator": str(out / "discriminator.yaml"),
           "experiment": "advrag-bench-gar-pipeline"}
    for name, body in (("gar", recipe), ("discriminator", judge), ("pipeline", run)):
        (out / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return out / "pipeline.yaml"


def scratch_project(cache_dir: Path) -> Path:
    """``cache_dir/project``: a git worktree where the pipelines run, moved to this checkout's
    commit before each seed (its data, index, stores and caches are untracked: they stay)."""
    project = (cache_dir / "project").resolve()
    if not (project / ".git").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(project),
                        "HEAD"], check=True)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "-C", str(project), "checkout", "-q", "--detach", "-f", head],
                   check=True)
    return project


def seed_result(args: argparse.Namespace, seed: int) -> dict:
    """One seed's pipeline result: read from ``<cache-dir>/seed<N>.json`` when it ran before,
    else run in a child process in the scratch project (which writes that file)."""
    done = args.cache_dir.resolve() / f"seed{seed}.json"
    if not done.is_file():
        project = scratch_project(args.cache_dir)
        env = os.environ | CHILD_ENV | {"PREFECT_HOME": str(project / ".prefect"),
                                        "HF_HOME": str(ROOT / ".cache/hf")}
        child_json([sys.executable, str(Path(__file__).resolve()), "--config",
                    str(args.config.resolve()), "--cache-dir", str(args.cache_dir.resolve()),
                    "--seed-run", str(seed)], env=env, cwd=project)
    return json.loads(done.read_text())


def run_seed(args: argparse.Namespace) -> None:
    """The child's work (cwd: the scratch project): one seed's pipeline, then what the report
    needs from its MLflow runs, written to ``<cache-dir>/seed<N>.json``."""
    from advrag.flows.pipeline import pipeline
    from advrag.tasks import tracking

    seed = args.seed_run
    config = seed_configs(args.config, seed, Path(".cache/bench-configs") / f"seed{seed}")
    started = time.perf_counter()
    result = pipeline(str(config), run_name=f"bench-gar-seed{seed}")
    tracking.configure()
    trained, judge = result["trained"], result["discriminator"]
    report = {"seed": seed, "commit": tracking.git_commit(), "wall_s": time.perf_counter() - started,
              "pipeline_run": result["run_id"], "rl_run": trained["run_id"],
              "steps_run": trained["steps_run"],
              "benchmarks": {stage: trained[stage] for stage in ("base", *STAGES)
                             if stage in trained},
              "rows": {stage: question_rows(trained["benchmark_runs"][stage]) for stage in STAGES},
              "discriminator": judge["metrics"], "curves": curves(trained["run_id"]),
              "decision": result["decision"].get("alias")}
    out = args.cache_dir / f"seed{seed}.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, default=str) + "\n")
    out.with_suffix(".tmp").replace(out)
    print(json.dumps({"seed": seed, "wall_s": report["wall_s"]}))


def question_rows(run_id: str) -> list[dict]:
    """A benchmark run's Search-R1 predictions on the world, one row per question with its kind."""
    from advrag.datasets.loaders import load_qa
    from advrag.datasets.records import question_kind
    from advrag.tasks import tracking

    kinds = {r.id: question_kind(r) for r in load_qa(Path("data/world/test.jsonl"))}
    return [{key: kinds[row["id"]] if key == "kind" else row[key] for key in ROW_KEYS}
            for row in tracking.read_table(run_id, "predictions/world/search_r1.json")]


def curves(run_id: str) -> dict[str, list[float]]:
    """The RL run's reward terms per update."""
    from advrag.tasks import tracking

    client = tracking.client()
    return {name: [m.value for m in sorted(client.get_metric_history(run_id, key),
                                           key=lambda m: m.step)]
            for name, key in REWARDS.items()}


def seed_mean(runs: list[list[dict]], key: str) -> list[float]:
    """Per question (same order in every run), ``key`` averaged over the runs (seeds)."""
    if any([r["id"] for r in run] != [r["id"] for r in runs[0]] for run in runs):
        raise ValueError("the seeds' benchmarks hold different questions: compare like with like")
    return [sum(run[i][key] for run in runs) / len(runs) for i in range(len(runs[0]))]


def comparison(warmup: list[list[dict]], trained: list[list[dict]]) -> dict:
    """Trained − warm-up over the seeds given: F1 and EM on all questions, F1 per kind."""
    kinds = [r["kind"] for r in warmup[0]]
    out = {"all": {key: paired(seed_mean(trained, key), seed_mean(warmup, key))
                   for key in ("f1", "em")}}
    f1 = {name: seed_mean(runs, "f1") for name, runs in (("warmup", warmup), ("trained", trained))}
    for kind in sorted(set(kinds)):
        pick = [i for i, k in enumerate(kinds) if k == kind]
        out[kind] = {"warmup_f1": sum(f1["warmup"][i] for i in pick) / len(pick),
                     "trained_f1": sum(f1["trained"][i] for i in pick) / len(pick),
                     "f1": paired([f1["trained"][i] for i in pick],
                                  [f1["warmup"][i] for i in pick])}
    return out


def summary(rows: list[dict]) -> dict:
    """F1 with its 95 % interval and searches per question."""
    mean, lo, hi = bootstrap_ci([r["f1"] for r in rows], n_boot=2000)
    return {"n": len(rows), "f1": {"mean": mean, "ci95": [lo, hi]},
            "searches": sum(r["n_searches"] for r in rows) / len(rows)}


def the_test(seeds: dict[int, dict]) -> dict:
    """The declared comparisons: pooled over the seeds, then each seed alone."""
    runs = {stage: [s["rows"][stage] for s in seeds.values()] for stage in STAGES}
    return {"pooled": comparison(runs["warmup"], runs["trained"]),
            "per_seed": {str(n): comparison([s["rows"]["warmup"]], [s["rows"]["trained"]])
                         for n, s in seeds.items()}}


def curves_figure(seeds: dict[int, dict]):
    """R_m, R_s, R_d, R_a per update, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(REWARDS), figsize=(15, 3.5))
    for ax, name in zip(axes, REWARDS):
        for seed, result in seeds.items():
            ax.plot(result["curves"][name], marker=".", label=f"seed {seed}")
        ax.set(title=name, xlabel="update")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/pipeline.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", type=Path, default=Path("bench/results/gar-pipeline.json"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-gar-pipeline"))
    parser.add_argument("--seed-run", type=int, default=None,
                        help="(child process) run the pipeline for this seed")
    args = parser.parse_args()
    if args.seed_run is not None:
        return run_seed(args)
    seeds = {seed: seed_result(args, seed) for seed in args.seeds}
    report = {"config": str(args.config), "seeds": args.seeds,
              "seed_runs": {str(n): {key: s[key] for key in s if key not in ("rows", "curves")}
                            for n, s in seeds.items()},
              "heldout_results": {f"{stage}-seed{n}": summary(s["rows"][stage])
                                  for n, s in seeds.items() for stage in STAGES},
              "curves": {str(n): s["curves"] for n, s in seeds.items()},
              "test": the_test(seeds)}
    write_report(args.out, report)
    write_rows(args.out.with_name(f"{args.out.stem}_rows.jsonl"),
               {f"{stage}-seed{n}": s["rows"][stage] for n, s in seeds.items()
                for stage in STAGES}, keys=ROW_KEYS)
    curves_figure(seeds).savefig(args.out.with_name(f"{args.out.stem}_curves.png"), dpi=110)
    print(json.dumps(report["test"]["pooled"], indent=1))


if __name__ == "__main__":
    main()
