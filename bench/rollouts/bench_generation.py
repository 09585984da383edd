"""Generation throughput: the batched ARR dialogue vs one trajectory at a time.

    python bench/rollouts/bench_generation.py [--batch 16] [--repeats 3] [--model smollm2]

Runs the same questions of the offline world's test split through
``run_arr_dialogue`` (a) all together (one generate call per turn over the
batch) and (b) one question at a time, with the same model, retriever and
token budgets, alternating the two in each repeat. Reports generated tokens/s
(median over repeats) and the ratio. Needs `dvc repro` to have built the index.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from advrag.agents.arr import run_arr_dialogue
from advrag.datasets.loaders import load_qa
from advrag.engines.local.generation import HFGenerator, pick_dtype
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world


def timed_dialogues(generator: HFGenerator, questions, retriever, batched: bool, args) -> float:
    """Tokens/s of ARR dialogues over ``questions``, batched or one at a time."""
    generator.generated_tokens = 0
    groups = [questions] if batched else [[q] for q in questions]
    start = time.perf_counter()
    for group in groups:
        run_arr_dialogue(
            group,
            generator,
            generator,
            retriever,
            max_turns=args.max_turns,
            topk=3,
            max_new_tokens=args.max_new_tokens,
        )
    return generator.generated_tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/generation.json"))
    args = parser.parse_args()
    offline_world()

    dtype = pick_dtype("auto")
    policy = load_policy(args.model, dtype=dtype)
    generator = HFGenerator(policy.model, policy.tokenizer, batch_size=args.batch)
    retriever = load_retriever(args.index)
    questions = [r.question for r in load_qa(Path("data/world/test.jsonl"), limit=args.batch)]
    rates = {"batched": [], "sequential": []}
    for _ in range(args.repeats):
        rates["batched"].append(timed_dialogues(generator, questions, retriever, True, args))
        rates["sequential"].append(timed_dialogues(generator, questions, retriever, False, args))
    medians = {k: statistics.median(v) for k, v in rates.items()}
    result = {
        "model": args.model,
        "dtype": dtype,
        "batch": args.batch,
        "repeats": args.repeats,
        "tokens_per_s": rates,
        "median_tokens_per_s": medians,
        "speedup": medians["batched"] / medians["sequential"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"| mode | median tokens/s ({dtype}, {args.repeats} repeats) |\n|---|---|")
    for key, value in medians.items():
        print(f"| {key} | {value:.1f} |")
    print(f"batched / sequential = {result['speedup']:.2f}×")


if __name__ == "__main__":
    main()
