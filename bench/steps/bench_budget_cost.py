"""What the budgets that hold three-hop episodes cost: GRPO updates of configs/train.yaml at the
old budgets (2 turns, 64 new tokens, max_seq_len 1024) beside the new ones (4 turns, 128 new
tokens, max_seq_len 3072), in one run.

    python bench/steps/bench_budget_cost.py [--start MODEL] [--rounds 4]

Both arms start from ``--start`` (default: a warm-up directory made by
``bench/learning/bench_chaining_warmup.py``, else SmolLM2 itself) and take the same questions
with the same sampling seed each round, in alternating order; a first, untimed round warms the
caches. The old arm is run as the step functions run it, without the budget check that now
refuses it (its episodes are cut: ``truncated_fraction``, ``cut_turns`` show how often).
Writes ``bench/results/budget_cost.json``: each arm's median tokens and seconds per update
(rollout and update), their ratios, and what each cut.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"old": {"max_turns": 2, "max_new_tokens": 64, "max_seq_len": 1024},
        "new": {"max_turns": 4, "max_new_tokens": 128, "max_seq_len": 3072}}
MEASURES = ("tokens", "rollout_s", "update_s", "searches", "cut_turns", "truncated_fraction")


def build(arm: dict, start: str):
    """configs/train.yaml's GRPO recipe at ``arm``'s budgets, built from ``start``."""
    from advrag.recipes import recipe_for

    recipe = recipe_for(ROOT / "configs/train.yaml", {
        "max_turns": arm["max_turns"], "max_new_tokens": arm["max_new_tokens"],
        "optim": {"lr": 5.0e-5, "micro_batch_size": 4, "max_seq_len": arm["max_seq_len"],
                  "kl_coef": 0.001}, "rollout_backend": "hf", "compile_update": False})
    recipe.build(start)
    return recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default=None)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/budget_cost.json")
    args = parser.parse_args()
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local.trainer import seed_everything
    from advrag.retrieval.retriever import load_retriever

    world = offline_world()
    warm = ROOT / ".cache/advrag/chaining/lora/epoch-2"
    start = args.start or (str(warm.relative_to(ROOT)) if (warm / "done.json").is_file()
                           else "smollm2")
    retriever, records = load_retriever(ROOT / "processed/index"), load_qa(world / "train.jsonl")
    recipes = {name: build(arm, start) for name, arm in ARMS.items()}
    measured: dict[str, list[dict]] = {name: [] for name in ARMS}
    for step in range(args.rounds + 1):
        order = list(ARMS) if step % 2 == 0 else list(reversed(ARMS))
        for name in order:
            seed_everything(step)
            started = time.perf_counter()
            metrics = recipes[name].step(retriever, recipes[name].batch(records, step))
            metrics["seconds"] = time.perf_counter() - started
            if step:  # the first round warms the caches
                measured[name].append(metrics)
            print(f"round {step} {name}: {metrics['seconds']:.1f} s, "
                  f"{metrics['tokens']:.0f} tokens", flush=True)
    medians = {name: {k: statistics.median(m[k] for m in rows) for k in (*MEASURES, "seconds")}
               for name, rows in measured.items()}
    write_report(args.out, {
        "command": f"python bench/steps/bench_budget_cost.py --start {start} "
                   f"--rounds {args.rounds}",
        "start": start, "arms": ARMS, "medians": medians,
        "ratios": {k: medians["new"][k] / medians["old"][k]
                   for k in ("tokens", "seconds", "rollout_s", "update_s") if medians["old"][k]}})


if __name__ == "__main__":
    main()
