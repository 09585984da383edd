"""Where a UR² policy fails, per question type and hop count — on the dev split only.

    python bench/learning/bench_ur2_dev.py --model <checkpoint dir> [--config configs/ur2.yaml]
        [--max-turns N] [--out bench/results/ur2-dev.json]
    python bench/learning/bench_ur2_dev.py --warmup-config <UR² config> ...  # its warm-up, trained

Greedy Search-R1 (``bench_ur2.evaluate``) on every dev question, grouped by the
world's question type and hops: EM, F1, searches, format errors, how often the
retrieved documents held a gold answer, and how often the policy's own text
(outside ``<information>``) held one — the step between finding the fact and
writing it as the answer. Diagnoses only: the held-out test split is never read. ``--warmup-config``
evaluates that config's SFT warm-up (``checkpoint_dir/warmup``), training it
first on the train split unless one made with the same settings is there.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

from bench_ur2 import evaluate

from advrag.config import load_config
from advrag.datasets.loaders import load_qa
from advrag.recipes.ur2 import UR2Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import question_group, write_report

INFORMATION = re.compile(r"<information>.*?</information>", re.S)


def gold_in_generated(row: dict) -> bool:
    """Whether a gold answer appears in what the policy wrote (documents and prompt removed)."""
    transcript = row["transcript"]
    generated = INFORMATION.sub("", transcript[transcript.rfind("<|im_start|>assistant"):])
    return any(gold.lower() in generated.lower() for gold in row["golden_answers"])


def diagnostics(row: dict) -> dict[str, float]:
    """One scored row's figures: EM, F1, searches, format errors, where the gold answer showed."""
    return {"em": row["em"], "f1": row["f1"], "searches": row["n_searches"],
            "format_errors": row["format_errors"],
            "gold_retrieved": float(row["retrieval_recall"] > 0),
            "gold_in_generated": float(gold_in_generated(row))}


def by_group(rows: list[dict], groups: list[str]) -> dict[str, dict]:
    """Means of ``diagnostics`` per group, in order of first appearance."""
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row, group in zip(rows, groups):
        grouped[group].append(diagnostics(row))
    return {group: {"n": len(members), **{key: sum(m[key] for m in members) / len(members)
                                           for key in members[0]}}
            for group, members in grouped.items()}


def warmed_up_model(config_file: str) -> str:
    """The warm-up of the UR² config in ``config_file``: trained (or reused), then its dir."""
    from advrag.recipes.ur2 import UR2Recipe
    from advrag.retrieval.retriever import load_retriever

    config = load_config(config_file, UR2Config)
    recipe = UR2Recipe(config)  # the flows' questions and dense index, as their warm-up gets
    model_dir, history = recipe.warm_up(load_retriever(config.index_dir, kind="dense"),
                                        recipe.training_questions())
    if history:
        print(f"warm-up: {len(history)} SFT steps, last loss {history[-1]['loss']:.3f}")
    return str(model_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="checkpoint directory or model name")
    source.add_argument("--warmup-config", help="a UR² config whose SFT warm-up to evaluate")
    parser.add_argument("--config", default="configs/ur2.yaml", help="world, index, turns, topk")
    parser.add_argument("--max-turns", type=int, default=None, help="default: the config's")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2-dev.json"))
    args = parser.parse_args()
    offline_world()
    model = args.model or warmed_up_model(args.warmup_config)
    config = load_config(args.config, UR2Config)
    records = load_qa(config.world_dir / "dev.jsonl")
    rows = evaluate(model, config, None, split="dev", max_turns=args.max_turns)
    groups = [question_group(r.metadata) for r in records]
    report = {"model": model, "warmup_config": args.warmup_config, "config": args.config,
              "split": "dev", "max_turns": args.max_turns or config.max_turns,
              "all": by_group(rows, ["all"] * len(rows))["all"], "by_type": by_group(rows, groups)}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
