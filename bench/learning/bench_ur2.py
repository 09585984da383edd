"""UR² learning evidence: curated two-stage RL vs the same budget on uncurated questions.

    python bench/learning/bench_ur2.py [--config configs/ur2-raw-docs.yaml] [--minutes 20]
        [--heldout 100]

1. **Start policy**: the config's SFT warm-up (shared by both arms; cached).
2. **Curation** with the start policy (k rollouts per question, cached): the share
   of questions whose k answer scores differ — GRPO groups with a learning
   signal — over all scored questions vs over the curated 7:2:1 sample.
3. **Two arms, one training budget each** (``--minutes`` of updates; curation time
   is reported apart): UR² on the curated pools, and UR² with ``curate: null``
   (both stages draw from all training questions). Rewards, valid queries,
   violations and informative groups per step are in MLflow and in the plot.
4. **Held-out evaluation** of the start policy and both arms, greedy Search-R1
   on the first ``--heldout`` questions of the world's test split (never used
   for any choice here): EM/F1 with 95 % bootstrap intervals and the 95 %
   interval of each paired difference (same questions), format errors, searches.

A replicate: ``--seed N --warmup-from <earlier cache-dir>/curated/warmup`` with a new
``--cache-dir`` and ``--out`` trains both arms again from the same start policy (its
curation scores come from the shared cache) with another training seed.

Writes ``--out`` (``bench/results/ur2.json``) with ``ur2_arms.json``,
``ur2_rows.jsonl`` (each policy's score per held-out question, for
``bench_ur2_pool.py``) and ``ur2_curves.png`` beside it (named after ``--out``).
Every phase resumes from its cache/checkpoints when rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from advrag.common.fileio import atomic_write_text
from advrag.config import BenchmarkConfig, load_config
from advrag.core.metrics import bootstrap_ci, paired_bootstrap_diff_ci
from advrag.recipes.ur2 import UR2Config
from advrag.tasks import tracking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report


def arm_config(config: UR2Config, name: str, minutes: float, curated: bool,
               root: Path) -> UR2Config:
    """One arm: its own checkpoints under ``root``, a wall-clock budget, no built-in benchmark."""
    update = {"checkpoint_dir": root / name, "curate": config.curate and config.curate.model_copy(
              update={"out_dir": root / "curation"}), "max_train_minutes": minutes, "steps": 10_000,
              "checkpoint_every": 10_000, "evaluate": None, "experiment": "advrag-bench-ur2",
              "registered_model": f"advrag-bench-ur2-{name}"}
    if not curated:
        update["curate"] = None
    return config.model_copy(update=update)


def share_warmup(source: Path, target: UR2Config) -> None:
    """Give ``target`` the warm-up at ``source`` (same settings, or the recipe refuses it)."""
    dst = target.checkpoint_dir / "warmup"
    if source.is_dir() and not dst.exists():
        shutil.copytree(source, dst)


def train_arm(config: UR2Config, name: str) -> dict:
    """Run the UR² recipe for one arm; the run id, model dir, history and seconds."""
    from advrag.flows.rl import run_recipe
    from advrag.recipes.ur2 import UR2Recipe

    started = time.perf_counter()
    result = run_recipe(UR2Recipe(config), "bench-ur2", name)
    return {"run_id": result["run_id"], "model_dir": result["model_dir"],
            "steps_run": result["steps_run"], "train_s": result["train_s"],
            "wall_s": time.perf_counter() - started, "history": history(result["run_id"])}


def history(run_id: str) -> dict[str, list[float]]:
    """Per-update curves of one arm, read back from its MLflow run."""
    client = tracking.client()
    keys = ("reward_mean", "informative_groups", "ur2/valid_queries", "ur2/violations",
            "ur2/correct", "ur2/stage", "format_errors", "searches")
    return {k: [m.value for m in sorted(client.get_metric_history(run_id, k),
                                        key=lambda m: m.step)] for k in keys}


def informative_share(rows: list[dict]) -> float:
    """Share of questions whose k answer scores are not all equal (a GRPO group with signal)."""
    return sum(len(set(r["rewards"])) > 1 for r in rows) / max(len(rows), 1)


def curation_signal(config: UR2Config) -> dict:
    """Informative share over every scored question, the curated sample and the stage-1 pool."""
    out_dir = config.curate.out_dir
    out = {"summary": json.loads((out_dir / "summary.json").read_text())}
    for table in ("scores", "curated", "stage1"):
        rows = [json.loads(line) for line in (out_dir / f"{table}.jsonl").read_text().splitlines()]
        out[table] = {"n": len(rows), "informative_share": informative_share(rows)}
    return out


def evaluate(model: str, config: UR2Config, n: int | None, split: str = "test",
             max_turns: int | None = None, max_new_tokens: int = 80) -> list[dict]:
    """Greedy Search-R1 on the first ``n`` questions of ``split`` (all when None), with the
    config's turn budget unless ``max_turns``, ``max_new_tokens`` a turn (80: the UR² records'
    setting; the rows count the turns it cut): one scored row per question."""
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local.generation import HFGenerator, pick_dtype
    from advrag.evaluation import methods
    from advrag.models.loading import load_policy

    settings = BenchmarkConfig(methods=["search_r1"], limit=n,
                               max_turns=max_turns or config.max_turns, topk=config.topk,
                               max_new_tokens=max_new_tokens, batch_size=32)
    records = load_qa(config.world_dir / f"{split}.jsonl", limit=n)
    policy = load_policy(model, dtype=pick_dtype("auto"))
    generator = methods.Generators(HFGenerator(policy.model, policy.tokenizer, batch_size=32))
    return method_rows("search_r1", records, generator, config.index_dir, settings)


def method_rows(method: str, records: list, generators, index_dir: Path, settings) -> list[dict]:
    """The benchmark's ``method`` on ``records`` in batches of 32 with the dense index at
    ``index_dir``: one scored row per question."""
    from advrag.evaluation import methods, scoring
    from advrag.retrieval.retriever import load_retriever

    retriever = methods.RecordingRetriever(load_retriever(index_dir, kind="dense"))
    outputs = []
    for start in range(0, len(records), 32):
        questions = [r.question for r in records[start:start + 32]]
        outputs += methods.run_method(method, questions, generators, retriever, settings)
    return scoring.score_rows(records, outputs)


def summary(rows: list[dict]) -> dict:
    """EM/F1 with 95 % intervals, format errors and searches per question."""
    out = {"n": len(rows)}
    for key in ("em", "f1"):
        mean, lo, hi = bootstrap_ci([r[key] for r in rows], n_boot=2000)
        out[key] = {"mean": mean, "ci95": [lo, hi]}
    for key in ("format_errors", "n_searches"):
        out[key] = sum(r[key] for r in rows) / len(rows)
    return out


def paired(a: list[dict], b: list[dict]) -> dict:
    """a − b on the same questions: mean and the 95 % paired-bootstrap interval per metric."""
    out = {}
    for key in ("em", "f1", "format_errors", "n_searches"):
        diff, lo, hi = paired_bootstrap_diff_ci([r[key] for r in a], [r[key] for r in b],
                                                n_boot=2000)
        out[key] = {"diff": diff, "ci95": [lo, hi]}
    return out


ROW_KEYS = ("id", "em", "f1", "format_errors", "n_searches", "prediction")


def write_rows(path: Path, rows: dict[str, list[dict]], keys: tuple[str, ...] = ROW_KEYS) -> None:
    """Each policy's per-question scores (``keys`` of each row, no transcripts) as jsonl,
    written whole or not at all."""
    lines = [json.dumps({"policy": name, **{k: row[k] for k in keys}})
             for name, policy_rows in rows.items() for row in policy_rows]
    atomic_write_text(path, ["\n".join(lines), "\n"])


def curves_figure(arms: dict[str, dict]):
    """Reward, informative groups, valid queries and violations per update, both arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("reward_mean", "informative_groups", "ur2/valid_queries", "ur2/violations")
    fig, axes = plt.subplots(1, len(keys), figsize=(16, 3.5))
    for ax, key in zip(axes, keys):
        for name, arm in arms.items():
            ax.plot(arm["history"][key], marker=".", label=name)
        ax.set_title(key)
        ax.set_xlabel("update")
    axes[0].legend()
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/ur2-raw-docs.yaml")
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget per arm")
    parser.add_argument("--heldout", type=int, default=100, help="test questions evaluated")
    parser.add_argument("--questions", type=int, default=None,
                        help="training questions to curate (default: the config's)")
    parser.add_argument("--stage1-steps", type=int, default=3,
                        help="stage-1 updates (the config's 10 would fill a CPU budget)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2.json"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-ur2"),
                        help="checkpoints and curation of this run (a rerun resumes from them)")
    parser.add_argument("--seed", type=int, default=None,
                        help="training seed of both arms (default: the config's optim.seed)")
    parser.add_argument("--warmup-from", type=Path, default=None,
                        help="start from this earlier run's warm-up (e.g. <cache-dir>/curated/"
                             "warmup) instead of training one: a replicate with another --seed")
    parser.add_argument("--reuse-arms", action="store_true",
                        help="evaluate the arms a previous run trained (<out>_arms.json)")
    args = parser.parse_args()
    offline_world()
    tracking.configure()
    base = load_config(args.config, UR2Config)
    curate = base.curate.model_copy(update={"questions": args.questions or base.curate.questions})
    if args.warmup_from and not (args.warmup_from / "warmup.json").is_file():
        parser.error(f"--warmup-from {args.warmup_from}: no warm-up there (no warmup.json); "
                     "name an earlier run's <cache-dir>/curated/warmup")
    seed = base.optim.seed if args.seed is None else args.seed
    optim = base.optim.model_copy(update={"seed": seed})
    base = base.model_copy(update={"stage1_steps": args.stage1_steps, "curate": curate,
                                   "optim": optim})
    curated_cfg = arm_config(base, "curated", args.minutes, curated=True, root=args.cache_dir)
    uncurated_cfg = arm_config(base, "uncurated", args.minutes, curated=False, root=args.cache_dir)

    arms_file = args.out.with_name(f"{args.out.stem}_arms.json")
    if args.reuse_arms:
        arms = json.loads(arms_file.read_text())
    else:
        if args.warmup_from:
            share_warmup(args.warmup_from, curated_cfg)
        arms = {"curated": train_arm(curated_cfg, "curated")}
        share_warmup(curated_cfg.checkpoint_dir / "warmup", uncurated_cfg)
        arms["uncurated"] = train_arm(uncurated_cfg, "uncurated")
        arms_file.write_text(json.dumps(arms, indent=2) + "\n")
    start_model = str(curated_cfg.checkpoint_dir / "warmup")

    rows = {"start": evaluate(start_model, base, args.heldout)}
    for name, arm in arms.items():
        rows[name] = evaluate(arm["model_dir"], base, args.heldout)
    report = {
        "config": args.config, "budget_minutes": args.minutes, "heldout": args.heldout,
        "stage1_steps": args.stage1_steps, "questions_curated": curate.questions,
        "seed": optim.seed, "warmup_from": args.warmup_from and str(args.warmup_from),
        "load_average": os.getloadavg(),
        "curation": curation_signal(curated_cfg),
        "arms": arms,
        "heldout_results": {name: summary(r) for name, r in rows.items()},
        "paired": {"curated-start": paired(rows["curated"], rows["start"]),
                   "uncurated-start": paired(rows["uncurated"], rows["start"]),
                   "curated-uncurated": paired(rows["curated"], rows["uncurated"])},
    }
    write_report(args.out, report)
    write_rows(args.out.with_name(f"{args.out.stem}_rows.jsonl"), rows)
    curves_figure(arms).savefig(args.out.with_name(f"{args.out.stem}_curves.png"), dpi=110)
    print(json.dumps({k: report[k] for k in ("curation", "heldout_results", "paired")}, indent=1))


if __name__ == "__main__":
    main()
