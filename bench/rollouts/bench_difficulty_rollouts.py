"""How long UR²'s difficulty estimation takes here: k sampled rollouts per training question.

    python bench/rollouts/bench_difficulty_rollouts.py [--questions 8] [--k 4] [--batch 32]
                                              [--backends hf vllm vllm-compiled] [--model DIR]
                                              [--vllm-block-size N]

Curation scores every training question by the mean reward of k rollouts of the
current policy (UR² samples k = 20). This runs the Search-R1 agent loop of
``configs/train.yaml`` (its turns, top-k, token cap and temperature; the dense
index) with the policy (``--model``, default the config's; a warmed-up one
searches as the policy being curated does) on each rollout back-end in turn
(transformers: a bf16 copy on a bf16 CPU; vLLM: an eager engine; vllm-compiled: one on
vLLM's torch.compile'd graph, what ``compile_rollout: auto`` picks for a paper-scale
curation), on
``--questions`` train questions × ``--k`` samples, ``--batch`` rollouts per
batched call, and reports per back-end rollouts/s, generated tokens/s and the
projected hours for the whole world's train split at k = 4, 8 and 20. One timed
pass after a small warm-up pass; sampling is random, so the work done
(rollouts, generated tokens, searches) is printed beside the time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report


def measure(backend: str, policy, tokenizer, config, questions: list[str], retriever,
            batch: int, block_size: int | None) -> dict:
    """One warm-up and one timed pass of the loop over ``questions`` on ``backend``
    (``block_size``: vLLM's KV block tokens, None = the generator's choice); the engine's
    start (and compile) is not timed."""
    from advrag.agents.search_loop import run_search_agent
    from advrag.engines.generators import make_generator
    from advrag.models.loading import resolve_model_dir

    generator = make_generator(backend.removesuffix("-compiled"), policy.model, tokenizer,
                               resolve_model_dir(config.model), temperature=config.temperature,
                               batch_size=batch, autocast=policy.autocast, block_size=block_size,
                               compile_rollout=backend == "vllm-compiled")

    def rollouts(chunk: list[str]) -> list:
        return run_search_agent(chunk, generator, retriever, max_turns=config.max_turns,
                                topk=config.topk, max_new_tokens=config.max_new_tokens)

    rollouts(questions[: min(4, len(questions))])  # warm-up
    before, start = generator.generated_tokens, time.perf_counter()
    done = [t for i in range(0, len(questions), batch) for t in rollouts(questions[i : i + batch])]
    seconds, tokens = time.perf_counter() - start, generator.generated_tokens - before
    return {"generator": type(generator).__name__, "rollouts": len(done),
            "generated_tokens": tokens, "seconds": seconds, "rollouts_per_s": len(done) / seconds,
            "generated_tokens_per_s": tokens / seconds,
            "mean_searches": sum(t.n_searches for t in done) / len(done)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
    parser.add_argument("--model", help="the policy (default: the config's model)")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backends", nargs="+", choices=["hf", "vllm", "vllm-compiled"],
                        default=["hf", "vllm"])
    parser.add_argument("--vllm-block-size", type=int,
                        help="vLLM's KV block tokens (default: the generator's choice)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/difficulty_rollouts.json"))
    args = parser.parse_args()
    offline_world()

    from advrag.config import load_config
    from advrag.datasets.loaders import load_qa
    from advrag.recipes.base import trainable_policy
    from advrag.recipes.grpo import GrpoConfig
    from advrag.retrieval.retriever import load_retriever

    config = load_config(args.config, GrpoConfig)
    if args.model:
        config = config.model_copy(update={"model": args.model})
    policy, tokenizer = trainable_policy(config.model, config, keep_reference=False,
                                         sequences=0)
    retriever = load_retriever(config.index_dir)
    train = load_qa(config.world_dir / "train.jsonl")
    questions = [r.question for r in train[: args.questions] for _ in range(args.k)]
    rows = {backend: measure(backend, policy, tokenizer, config, questions, retriever, args.batch,
                             args.vllm_block_size)
            for backend in args.backends}
    for row in rows.values():
        row["projected_hours_for_train_split"] = {
            f"k={k}": len(train) * k / row["rollouts_per_s"] / 3600 for k in (4, 8, 20)}
    write_report(args.out, {
        "bench": "bench/rollouts/bench_difficulty_rollouts.py", "model": config.model,
        "bf16_cpu": policy.cpu_bf16,
        "settings": {"questions": args.questions, "k": args.k, "batch": args.batch,
                     "max_turns": config.max_turns, "topk": config.topk,
                     "max_new_tokens": config.max_new_tokens,
                     "temperature": config.temperature,
                     "vllm_block_size": args.vllm_block_size},
        "train_questions": len(train), "rows": rows,
    })


if __name__ == "__main__":
    main()
