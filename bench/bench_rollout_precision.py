"""HF rollouts in fp32, under bf16 autocast, and from a bf16 copy, side by side.

    python bench/bench_rollout_precision.py [--batch 16] [--repeats 3] [--max-turns 1]

The train flow's policy (SmolLM2-135M + LoRA r16, fp32 weights) samples the
same Search-R1 rollout three ways, interleaved in one process so that machine
load hits all three alike:
- ``fp32``: transformers ``generate`` on the policy as it is;
- ``bf16-autocast``: the same under the policy's CPU bf16 autocast (how the
  old log-probs are computed);
- ``bf16-copy``: ``inference_copy``, a LoRA-merged copy of the policy cast to
  bf16, which ``SnapshotGenerator`` samples and refreshes after every update
  (the train flow's rollouts since this benchmark), so the copy's cost is timed too.

Tokens/s = generated tokens / rollout wall time (retrieval included); medians
over ``repeats``, each repeat seeding every mode alike. Needs `dvc repro`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from bench_rollout import rollout_rate
from reporting import write_report

from advrag.datasets.loaders import load_qa
from advrag.engines.local.generation import HFGenerator, inference_copy
from advrag.engines.local.policy import LoraSettings, TrainablePolicy
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_precision.json"))
    args = parser.parse_args()

    loaded = load_policy("smollm2", dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=16, alpha=32), cpu_bf16=True)
    copy_s = []
    start = time.perf_counter()
    sampler = inference_copy(policy.model, torch.bfloat16)
    copy_s.append(time.perf_counter() - start)
    settings = {"temperature": 1.0, "batch_size": args.batch}
    generators = {
        "fp32": HFGenerator(policy.model, loaded.tokenizer, **settings),
        "bf16-autocast": HFGenerator(policy.model, loaded.tokenizer, autocast=policy.autocast,
                                     **settings),
        "bf16-copy": HFGenerator(sampler, loaded.tokenizer, **settings),
    }
    retriever = load_retriever(args.index)
    questions = [r.question for r in load_qa(Path("data/world/train.jsonl"), limit=args.batch)]
    rates = {mode: [] for mode in generators}
    for repeat in range(args.repeats):
        for mode, generator in generators.items():
            torch.manual_seed(repeat)
            rates[mode].append(rollout_rate(generator, questions, retriever, args))
            print(f"repeat {repeat + 1}/{args.repeats} {mode}: {rates[mode][-1]:.1f} tokens/s",
                  flush=True)
        start = time.perf_counter()
        generators["bf16-copy"].model = inference_copy(policy.model, torch.bfloat16)
        copy_s.append(time.perf_counter() - start)
    medians = {mode: statistics.median(r) for mode, r in rates.items()}
    write_report(args.out, {
        "model": "smollm2 + LoRA r16", "batch": args.batch, "repeats": args.repeats,
        "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens,
        "bf16_native": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "tokens_per_s": rates, "median_tokens_per_s": medians,
        "ratio_to_fp32": {mode: m / medians["fp32"] for mode, m in medians.items()},
        "bf16_copy_s": copy_s, "median_bf16_copy_s": statistics.median(copy_s),
    })


if __name__ == "__main__":
    main()
