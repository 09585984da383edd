"""ARR's warm-up size, chosen on dev before any RL (the adversarial protocol's declared follow-up).

    python bench/learning/bench_arr_warmup.py --start .cache/advrag/chaining/full-3hop/rs4 \\
        [--sizes 32 128 256] [--dev 100] [--plan]

ARR's seed 0 lost the start's chaining: after ARR's warm-up of 32 grounded dialogues and 48
updates its dialogues searched once and scored 0 on chained questions
(docs/chaining-experiments.md). For each size this runs configs/arr.yaml's warm-up on the start
with that many grounded dialogues (every other setting the config's, the demonstrations the
training split's first), then the benchmark's ``arr`` method with the warmed-up model in both
roles on the first ``--dev`` dev questions. It writes ``--out`` after each size: a rerun scores
only the sizes without an entry, and reuses a finished warm-up from ``--cache-dir``. The chosen
size is the one with the highest dev F1 over all the dev questions (a tie: the smaller).
``--plan`` runs the dialogues whose reasoner states the question's facts first
(``warmup_plan``), into a record of its own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import model_digest
from bench_adversarial import arr_rows
from bench_rex_rag import kept_columns, summary
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]


def size_config(start: Path, size: int, cache_dir: Path, plan: bool = False):
    """configs/arr.yaml with the start as its model and ``size`` warm-up dialogues (stating
    their plan with ``plan``)."""
    from advrag.config import load_config
    from advrag.recipes.arr import ArrConfig

    config = load_config(ROOT / "configs/arr.yaml", ArrConfig)
    return config.model_copy(update={
        "model": str(start), "warmup_plan": plan,
        "checkpoint_dir": cache_dir / f"dialogues-{size}{'-plan' if plan else ''}",
        "warmup": config.warmup.model_copy(update={"demonstrations": size})})


def demonstration_kinds(recipe, retriever, records) -> dict[str, int]:
    """How many of the warm-up's dialogues answer each question kind (the same dialogues
    ``warm_up`` builds: scripted agents and the real retriever, no model)."""
    from advrag.curation.arr_demonstrations import build_arr_demonstrations
    from advrag.datasets.records import question_kind
    from advrag.engines.local.generation import ChatPrompting
    from advrag.models.loading import load_tokenizer

    c = recipe.config
    prompting = ChatPrompting(load_tokenizer(c.model))
    dialogues = build_arr_demonstrations(records, retriever, prompting.chat_prompt, topk=c.topk,
                                         max_turns=c.max_turns, limit=c.warmup.demonstrations,
                                         plan=c.warmup_plan)
    by_question = {r.question: question_kind(r) for r in records}
    return dict(Counter(by_question[d.question] for d in dialogues))


def measure_size(args: argparse.Namespace, size: int) -> dict:
    """One size: its warm-up (trained or reused) and its dialogues on the dev questions."""
    from advrag.evaluation.scoring import summarize
    from advrag.recipes.arr import ArrRecipe
    from advrag.retrieval.retriever import load_retriever

    recipe = ArrRecipe(size_config(args.start, size, args.cache_dir, args.plan))
    retriever = load_retriever(recipe.config.index_dir, kind="dense")
    records = recipe.training_questions()
    started = time.perf_counter()
    warm_dir, history = recipe.warm_up(retriever, records)
    seconds = time.perf_counter() - started
    rows = arr_rows({"reasoner": str(warm_dir), "verifier": str(warm_dir)}, recipe.config,
                    args.dev, "dev")
    kinds = demonstration_kinds(recipe, retriever, records)
    return {"dialogues": size, "dialogues_kept": sum(kinds.values()), "dialogues_by_kind": kinds,
            "sft": {"steps": len(history), "seconds": seconds if history else None,
                    "first_loss": history[0]["loss"] if history else None,
                    "last_loss": history[-1]["loss"] if history else None},
            "dev": summary(rows) | {"format_errors": sum(r["format_errors"] for r in rows) / len(rows)},
            "verifier": {k: v for k, v in summarize(rows).items() if k.startswith("verifier/")},
            "rows": kept_columns(rows)}


def chosen(sizes: dict[str, dict]) -> int:
    """The size with the highest dev F1 over all the dev questions; a tie goes to the smaller."""
    return min((int(s) for s in sizes), key=lambda s: (-sizes[str(s)]["dev"]["f1"]["mean"], s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=Path, required=True, help="the chaining warm-up")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 256],
                        help="warm-up dialogues, in the order they run")
    parser.add_argument("--dev", type=int, default=100, help="dev questions scored")
    parser.add_argument("--plan", action="store_true",
                        help="dialogues whose reasoner states the question's facts first")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: bench/results/arr_warmup-dev.json (-plan-dev with --plan)")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/advrag/bench-arr-warmup"))
    args = parser.parse_args()
    args.out = args.out or Path(f"bench/results/arr_warmup{'-plan' if args.plan else ''}-dev.json")
    if not (args.start / "config.json").is_file():
        parser.error(f"--start {args.start} holds no model: run `make chaining-start` first")
    offline_world()
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if report and (report["start_digest"], report.get("plan", False)) != (
            model_digest(args.start), args.plan):
        parser.error(f"{args.out} was measured on start {report['start_digest']} with plan "
                     f"{report.get('plan', False)}, not {model_digest(args.start)} with plan "
                     f"{args.plan}: pass another --out")
    report |= {"command": "python " + " ".join(sys.argv), "start": str(args.start),
               "start_digest": model_digest(args.start), "plan": args.plan}
    sizes = report.setdefault("sizes", {})
    for size in args.sizes:
        if str(size) in sizes:
            continue
        sizes[str(size)] = measure_size(args, size)
        report["chosen"] = chosen(sizes)
        write_report(args.out, report)
        dev = sizes[str(size)]["dev"]
        print(json.dumps({"dialogues": size, "dev_f1": dev["f1"]["mean"],
                          "searches": dev["searches"], "chosen": report["chosen"]}), flush=True)


if __name__ == "__main__":
    main()
