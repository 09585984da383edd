"""REX-RAG learning evidence: REX-RAG vs GRPO from one start policy, same updates, several seeds.

    python bench/learning/bench_rex_rag.py [--config configs/rex-rag.yaml] [--seeds 0 1 2] \
        [--steps 24] [--questions-per-step 2] [--heldout 100] [--start MODEL_DIR]

The protocol (declared in docs/rex-rag-experiments.md before any run):

1. **Start policy**: ``--start`` (a saved model, e.g. the chaining warm-up of
   docs/chaining-experiments.md), or else the config's SFT warm-up (four turns, so its
   demonstrations include three-hop chains), trained once (by the first arm, ``rex`` of the
   first seed); either way shared by every arm and seed.
2. **Two arms per seed**, the same ``--steps`` updates of the same questions per update:
   ``rex`` (the config: probes, filter, correction) and ``grpo`` (the config with
   ``exploration: null``). Only ``optim.seed`` changes between seeds.
3. **Held-out evaluation** of the start policy and every arm: greedy Search-R1 with the
   config's turn budget on the first ``--heldout`` questions of the world's test split
   (never used for a choice). Per arm: EM/F1 with 95 % intervals, searches per question;
   per question kind (single, two-hop, three-hop, comparison) F1 and searches.
4. **The test**: per question, each arm's F1 averaged over the seeds; the 95 % paired
   bootstrap interval of rex − grpo over the multi-hop questions (two-hop, three-hop,
   comparison), and the same for searches per multi-hop question (rex − start).

Writes ``--out`` (``bench/results/rex-rag.json``) with ``rex-rag_rows.jsonl`` (each
policy's score per held-out question) and ``rex-rag_curves.png`` (per-update curves of
every run) beside it. Each arm trains in a child process and leaves ``<cache-dir>/<arm>.json``;
a rerun reuses the arms that finished and resumes the others from their checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from advrag.config import load_config
from advrag.core.metrics import bootstrap_ci, paired_bootstrap_diff_ci
from advrag.datasets.records import question_kind
from advrag.recipes.grpo import GrpoConfig
from advrag.tasks import tracking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from bench_ur2 import ROW_KEYS, write_rows
from bench_ur2 import evaluate as search_r1_rows
from inputs import offline_world
from reporting import child_json, write_report

MULTI_HOP = ("two-hop", "three-hop", "comparison")
CURVES = ("reward_mean", "searches", "rex/probes_opened", "rex/probes_kept",
          "rex/policy_accuracy", "rex/probe_accuracy", "rex/keep_ratio")


def arm_config(config: GrpoConfig, arm: str, seed: int, steps: int, root: Path) -> GrpoConfig:
    """One arm of one seed: its checkpoints under ``root`` (at most 8 updates apart, so a killed
    run loses little), ``steps`` updates, no benchmark."""
    update = {"checkpoint_dir": root / f"{arm}-seed{seed}", "steps": steps,
              "checkpoint_every": max(min(steps // 3, 8), 1), "evaluate": None,
              "experiment": "advrag-bench-rex-rag",
              "registered_model": f"advrag-bench-rex-rag-{arm}-seed{seed}",
              "optim": config.optim.model_copy(update={"seed": seed})}
    if arm == "grpo":
        update["exploration"] = None
    return config.model_copy(update=update)


def train_arm(config: GrpoConfig, name: str, warmup: Path | None) -> dict:
    """Run the recipe for one arm (starting from ``warmup`` when given); its run and curves."""
    from advrag.flows.rl import run_recipe
    from advrag.recipes.grpo import GrpoRecipe

    if warmup is not None and not (config.checkpoint_dir / "warmup").exists():
        shutil.copytree(warmup, config.checkpoint_dir / "warmup")
    started = time.perf_counter()
    result = run_recipe(GrpoRecipe(config), "bench-rex-rag", name)
    return {"run_id": result["run_id"], "model_dir": str(result["model_dir"]),
            "steps_run": result["steps_run"], "wall_s": time.perf_counter() - started,
            "curves": curves(result["run_id"])}


def curves(run_id: str) -> dict[str, list[float]]:
    """The per-update ``CURVES`` of one MLflow run."""
    client = tracking.client()
    return {key: [m.value for m in sorted(client.get_metric_history(run_id, key),
                                          key=lambda m: m.step)] for key in CURVES}


def arm_result(args: argparse.Namespace, arm: str, seed: int) -> dict:
    """One arm's result: read from ``<cache-dir>/<arm>-seed<seed>.json`` when it was trained
    before, else trained in a child process (each arm's rollout engine and policy are freed
    when it exits; in one process they piled up) that writes that file."""
    done = args.cache_dir / f"{arm}-seed{seed}.json"
    if not done.is_file():
        start = ["--start", str(args.start)] if args.start else []
        child_json([sys.executable, __file__, "--config", args.config, "--steps", str(args.steps),
                    "--questions-per-step", str(args.questions_per_step), *start,
                    "--cache-dir", str(args.cache_dir), "--arm", arm, "--seeds", str(seed)])
    return json.loads(done.read_text())


def train_one(args: argparse.Namespace, base: GrpoConfig) -> None:
    """The child's work: train ``--arm`` for its seed from the shared start, write its result."""
    seed, name = args.seeds[0], f"{args.arm}-seed{args.seeds[0]}"
    config = arm_config(base, args.arm, seed, args.steps, args.cache_dir)
    shared = args.cache_dir / "rex-seed0" / "warmup"  # the first arm's, when no --start
    result = train_arm(config, name, shared if not args.start and shared.is_dir() else None)
    out = args.cache_dir / f"{name}.json"
    out.with_suffix(".tmp").write_text(json.dumps(result) + "\n")
    out.with_suffix(".tmp").replace(out)
    print(json.dumps({"arm": name, "steps_run": result["steps_run"]}))


def start_policy(args: argparse.Namespace) -> Path:
    """``--start``, or the warm-up the first arm trained (``rex-seed0/warmup``)."""
    return args.start or args.cache_dir / "rex-seed0" / "warmup"


def evaluate(model: str, config: GrpoConfig, n: int) -> list[dict]:
    """Greedy Search-R1 with the config's turn and token budgets (its ``evaluate`` section's,
    the budgets the start was benchmarked with) on the first ``n`` test questions
    (``bench_ur2.evaluate``), each row with its question kind."""
    from advrag.datasets.loaders import load_qa

    budgets = config.evaluate or config
    rows = search_r1_rows(model, config, n, max_turns=budgets.max_turns,
                          max_new_tokens=budgets.max_new_tokens)
    records = load_qa(config.world_dir / "test.jsonl", limit=n)
    for row, record in zip(rows, records, strict=True):
        row["kind"] = question_kind(record)
    return rows


def summary(rows: list[dict]) -> dict:
    """EM/F1 with 95 % intervals and searches, overall and per question kind."""
    out: dict = {"n": len(rows)}
    for key in ("em", "f1"):
        mean, lo, hi = bootstrap_ci([r[key] for r in rows], n_boot=2000)
        out[key] = {"mean": mean, "ci95": [lo, hi]}
    out["searches"] = sum(r["n_searches"] for r in rows) / len(rows)
    out["cut_turns"] = sum(r["cut_turns"] for r in rows) / len(rows)  # by max_new_tokens
    kinds = sorted({r["kind"] for r in rows})
    out["by_kind"] = {kind: {"n": len(part), "f1": sum(r["f1"] for r in part) / len(part),
                             "searches": sum(r["n_searches"] for r in part) / len(part)}
                      for kind in kinds for part in [[r for r in rows if r["kind"] == kind]]}
    return out


def seed_mean(runs: list[list[dict]], key: str) -> list[float]:
    """Per question (same order in every run), ``key`` averaged over the runs (seeds)."""
    return [sum(run[i][key] for run in runs) / len(runs) for i in range(len(runs[0]))]


def paired(a: list[float], b: list[float]) -> dict:
    """a − b on the same questions: mean and 95 % paired-bootstrap interval."""
    diff, lo, hi = paired_bootstrap_diff_ci(a, b, n_boot=2000)
    return {"diff": diff, "ci95": [lo, hi], "n": len(a)}


def the_test(rows: dict[str, list[dict]], seeds: list[int]) -> dict:
    """The declared comparisons over the multi-hop questions (and over all, for context)."""
    multi = [i for i, r in enumerate(rows["start"]) if r["kind"] in MULTI_HOP]
    arm = {name: [rows[f"{name}-seed{s}"] for s in seeds] for name in ("rex", "grpo")}
    f1 = {name: seed_mean(runs, "f1") for name, runs in arm.items()}
    searches = {name: seed_mean(runs, "n_searches") for name, runs in arm.items()}
    start_searches = [r["n_searches"] for r in rows["start"]]

    def pick(values: list[float]) -> list[float]:
        return [values[i] for i in multi]

    return {
        "multi_hop_questions": len(multi),
        "rex-grpo_f1_multi_hop": paired(pick(f1["rex"]), pick(f1["grpo"])),
        "rex-grpo_f1_all": paired(f1["rex"], f1["grpo"]),
        "rex-start_searches_multi_hop": paired(pick(searches["rex"]), pick(start_searches)),
        "grpo-start_searches_multi_hop": paired(pick(searches["grpo"]), pick(start_searches)),
        "per_seed_rex-grpo_f1_multi_hop": {
            str(s): paired(pick([r["f1"] for r in rows[f"rex-seed{s}"]]),
                           pick([r["f1"] for r in rows[f"grpo-seed{s}"]])) for s in seeds},
    }


def curves_figure(arms: dict[str, dict]):
    """Per-update reward, searches, probes and accuracies of every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.5))
    panels = (("reward_mean",), ("searches",), ("rex/probes_opened", "rex/probes_kept"),
              ("rex/policy_accuracy", "rex/probe_accuracy"))
    for ax, keys in zip(axes, panels):
        for name, arm in arms.items():
            for key in keys:
                if arm["curves"][key]:
                    ax.plot(arm["curves"][key], marker=".", label=f"{name} {key}")
        ax.set_title(" / ".join(keys))
        ax.set_xlabel("update")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/rex-rag.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=24, help="updates per arm and seed")
    parser.add_argument("--questions-per-step", type=int, default=None,
                        help="override the config's questions_per_step (each a group of group_size)")
    parser.add_argument("--heldout", type=int, default=100, help="test questions evaluated")
    parser.add_argument("--start", type=Path, default=None,
                        help="a saved model every arm starts from (default: the config's warm-up)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/rex-rag.json"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-rex-rag"))
    parser.add_argument("--arm", choices=("rex", "grpo"), default=None,
                        help="(child process) train this arm for the one seed of --seeds")
    args = parser.parse_args()
    offline_world()
    tracking.configure()
    base = load_config(args.config, GrpoConfig)
    if base.exploration is None:
        parser.error(f"--config {args.config}: no exploration: section, nothing to compare")
    if args.start and not (args.start / "config.json").is_file():
        parser.error(f"--start {args.start}: no saved model there (no config.json)")
    if args.start:  # RL starts from it: no warm-up of the config's own
        base = base.model_copy(update={"model": str(args.start), "warmup": None})
    if args.questions_per_step:
        base = base.model_copy(update={"questions_per_step": args.questions_per_step})
    args.questions_per_step = base.questions_per_step
    if args.arm:
        return train_one(args, base)
    arms = {f"{arm}-seed{seed}": arm_result(args, arm, seed)
            for seed in args.seeds for arm in ("rex", "grpo")}
    rows = {"start": evaluate(str(start_policy(args)), base, args.heldout)}
    for name, arm in arms.items():
        rows[name] = evaluate(arm["model_dir"], base, args.heldout)
    report = {"config": args.config, "seeds": args.seeds, "steps": args.steps,
              "questions_per_step": base.questions_per_step, "group_size": base.group_size,
              "start": str(args.start) if args.start else "the config's warm-up",
              "heldout": args.heldout, "max_turns": base.max_turns,
              "load_average": os.getloadavg(), "arms": arms,
              "heldout_results": {name: summary(r) for name, r in rows.items()},
              "test": the_test(rows, args.seeds)}
    write_report(args.out, report)
    write_rows(args.out.with_name(f"{args.out.stem}_rows.jsonl"), rows,
               keys=(*ROW_KEYS, "cut_turns", "kind"))
    curves_figure(arms).savefig(args.out.with_name(f"{args.out.stem}_curves.png"), dpi=110)
    print(json.dumps({"heldout": {k: {"f1": v["f1"]["mean"], "searches": v["searches"]}
                                  for k, v in report["heldout_results"].items()},
                      "test": report["test"]}, indent=1))


if __name__ == "__main__":
    main()
