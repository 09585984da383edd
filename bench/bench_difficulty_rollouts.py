"""How long UR²'s difficulty estimation takes here: k sampled rollouts per training question.

    python bench/bench_difficulty_rollouts.py [--questions 8] [--k 4] [--batch 32]

Curation scores every training question by the mean reward of k rollouts of the
current policy (UR² samples k = 20). This runs the Search-R1 agent loop of
``configs/train.yaml`` (SmolLM2-135M on the train flow's generator: a bf16 copy
on a bf16 CPU; its turns, top-k, token cap and temperature; the dense index)
on ``--questions`` train questions × ``--k`` samples, ``--batch`` rollouts per
batched call, and reports rollouts/s, generated tokens/s and the projected
hours for the whole world's train split at k = 4, 8 and 20. One timed pass
after a small warm-up pass; sampling is random, so the work done (rollouts,
generated tokens) is printed beside the time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from reporting import write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("bench/results/difficulty_rollouts.json"))
    args = parser.parse_args()

    from advrag.agents.search_loop import run_search_agent
    from advrag.config import TrainFlowConfig, load_config
    from advrag.datasets.loaders import load_qa
    from advrag.engines.generators import make_generator
    from advrag.models.loading import resolve_model_dir
    from advrag.recipes.base import trainable_policy
    from advrag.retrieval.retriever import load_retriever

    config = load_config(args.config, TrainFlowConfig)
    policy, tokenizer = trainable_policy(config.model, config, keep_reference=False)
    generator = make_generator("hf", policy.model, tokenizer, resolve_model_dir(config.model),
                               temperature=config.temperature, batch_size=args.batch,
                               autocast=policy.autocast)
    retriever = load_retriever(config.index_dir)
    train = load_qa(config.world_dir / "train.jsonl")
    questions = [r.question for r in train[: args.questions] for _ in range(args.k)]

    def rollouts(batch: list[str]) -> list:
        return run_search_agent(batch, generator, retriever, max_turns=config.max_turns,
                                topk=config.topk, max_new_tokens=config.max_new_tokens)

    rollouts(questions[: min(4, len(questions))])  # warm-up
    before, start = generator.generated_tokens, time.perf_counter()
    done = [t for i in range(0, len(questions), args.batch)
            for t in rollouts(questions[i : i + args.batch])]
    seconds, tokens = time.perf_counter() - start, generator.generated_tokens - before
    per_s = len(done) / seconds
    write_report(args.out, {
        "bench": "bench/bench_difficulty_rollouts.py", "model": config.model,
        "generator": type(generator).__name__, "bf16_cpu": policy.cpu_bf16,
        "settings": {"questions": args.questions, "k": args.k, "batch": args.batch,
                     "max_turns": config.max_turns, "topk": config.topk,
                     "max_new_tokens": config.max_new_tokens,
                     "temperature": config.temperature},
        "rollouts": len(done), "generated_tokens": tokens, "seconds": seconds,
        "rollouts_per_s": per_s, "generated_tokens_per_s": tokens / seconds,
        "mean_searches": sum(t.n_searches for t in done) / len(done),
        "train_questions": len(train),
        "projected_hours_for_train_split": {f"k={k}": len(train) * k / per_s / 3600
                                            for k in (4, 8, 20)},
    })


if __name__ == "__main__":
    main()
