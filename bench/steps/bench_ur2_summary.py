"""What UR²'s LLM summaries cost on a CPU: one update of configs/ur2.yaml (summaries on) beside
the same update of configs/ur2-raw-docs.yaml (raw documents), in one run.

    python bench/steps/bench_ur2_summary.py [--rounds 3]

The two configs differ only in ``summary.summarise`` (checked here), so one UR² recipe is
built and each update runs with its summariser attached (summaries) or detached (raw
documents, which is what ``summarise: false`` builds). The policy starts from the config's
SFT warm-up (cached under ``--cache-dir``), as RL does. Each round runs the two variants on
the same stage-2 questions with the same sampling seed, in alternating order; a first,
untimed round starts the engines. Every timed update with summaries gets an empty summary
cache, so every search waits for a summary: the cost of a first epoch (later epochs reuse
summaries of repeated queries). The policy is updated by every step, so both variants train
the same drifting policy.

Writes ``--out`` (bench/results/ur2-summary.json): each variant's median update seconds
(rollout, score, update), their ratio, the searches per update and what the summariser
answered (summaries, fallback messages, raw documents).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

PARTS = ("rollout_s", "score_s", "update_s")
SUMMARY_COUNTS = ("requests", "summaries", "fallbacks", "raw_fallbacks")


def load_pair(summaries: Path, raw_docs: Path):
    """Both configs, refused unless they differ only in ``summary.summarise`` (and names)."""
    from advrag.config import load_config
    from advrag.recipes.ur2 import UR2Config

    on, off = load_config(summaries, UR2Config), load_config(raw_docs, UR2Config)
    ignored = {"checkpoint_dir", "registered_model", "summary"}
    differ = {k for k in UR2Config.model_fields if k not in ignored
              and getattr(on, k) != getattr(off, k)}
    if differ or on.summary.model_copy(update={"summarise": False}) != off.summary:
        raise SystemExit(f"{raw_docs} differs from {summaries} beyond summary.summarise: "
                         f"{sorted(differ) or 'summary'}")
    if not on.summary.summarise:
        raise SystemExit(f"{summaries} has summary.summarise false: nothing to measure")
    return on


def timed_update(recipe, retriever, batch, seed: int, summariser, cache_dir: Path | None):
    """One stage-2 update of ``batch`` with ``summariser`` (None: raw documents): its seconds
    by part, searches per trajectory and the summariser's answers during it."""
    from advrag.engines.local.trainer import seed_everything
    from advrag.retrieval.summary import SummaryCache

    recipe.summariser = summariser
    before = summariser.stats.as_dict() if summariser else {}
    if summariser is not None:
        summariser.cache = SummaryCache(cache_dir)
    seed_everything(seed)
    started = time.perf_counter()
    metrics = recipe.step(retriever, batch)
    seconds = {p: metrics[p] for p in PARTS} | {"total_s": time.perf_counter() - started}
    after = summariser.stats.as_dict() if summariser else {}
    answered = {k: after[k] - before[k] for k in SUMMARY_COUNTS} if summariser else {}
    return seconds | {"searches": metrics.get("searches", float("nan"))} | answered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=Path("configs/ur2.yaml"))
    parser.add_argument("--raw-docs", type=Path, default=Path("configs/ur2-raw-docs.yaml"))
    parser.add_argument("--rounds", type=int, default=3, help="timed updates per variant")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-ur2-summary"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2-summary.json"))
    args = parser.parse_args()

    from advrag.recipes.ur2 import UR2Recipe
    from advrag.retrieval.retriever import load_retriever

    offline_world()
    config = load_pair(args.config, args.raw_docs).model_copy(update={
        "checkpoint_dir": args.cache_dir / "checkpoints", "stage1_steps": 0})
    recipe, retriever = UR2Recipe(config), load_retriever(config.index_dir)
    records = recipe.training_questions()
    started = time.perf_counter()
    warm_dir, _ = recipe.warm_up(retriever, records)
    warmup_s = time.perf_counter() - started
    recipe.build(str(warm_dir))
    summariser, scratch = recipe.summariser, Path(tempfile.mkdtemp(prefix="ur2-summary-"))
    variants = {"summaries": summariser, "raw_docs": None}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for round_ in range(args.rounds + 1):
        batch = recipe.batch(records, round_)
        order = list(variants) if round_ % 2 else list(reversed(variants))
        for name in order:
            result = timed_update(recipe, retriever, batch, config.optim.seed + round_,
                                  variants[name], scratch / f"{name}-{round_}")
            print(f"round {round_} {name}: {result}", flush=True)
            if round_:  # round 0 starts the engines, untimed
                runs[name].append(result)
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
               for name, rows in runs.items()}
    write_report(args.out, {
        "median": medians,
        "ratio_total": medians["summaries"]["total_s"] / medians["raw_docs"]["total_s"],
        "runs": runs, "warmup_s": warmup_s,
        "settings": {"rounds": args.rounds, "questions_per_step": config.questions_per_step,
                     "group_size": config.group_size, "max_turns": config.max_turns,
                     "topk": config.topk, "summary": config.summary.model_dump(mode="json"),
                     "rollout_backend": config.rollout_backend}})


if __name__ == "__main__":
    main()
