"""HF rollouts in fp32 and under bf16 autocast, each live or from a merged copy, side by side.

    python bench/rollouts/bench_rollout_precision.py [--batch 16] [--repeats 3] [--max-turns 1]
                                            [--modes fp32 fp32-copy bf16-autocast bf16-copy]

The train flow's policy (SmolLM2-135M + LoRA r16, fp32 weights) samples the
same Search-R1 rollout up to four ways, interleaved in one process so that
machine load hits them alike:
- ``fp32``: transformers ``generate`` on the policy as it is (adapters unmerged);
- ``fp32-copy``: ``inference_copy``, a LoRA-merged fp32 copy, which
  ``SnapshotGenerator`` samples and refreshes after every update (the train
  flow's fp32 LoRA rollouts since this benchmark's fp32-copy row);
- ``bf16-autocast``: the live policy under its CPU bf16 autocast (how the
  old log-probs are computed);
- ``bf16-copy``: the merged copy cast to bf16 (the train flow's rollouts under
  CPU bf16). Each copy is rebuilt after every repeat and its cost timed.

Tokens/s = generated tokens / rollout wall time (retrieval included); medians
over ``repeats``, each repeat seeding every mode alike. Needs `dvc repro`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from bench_rollout import rollout_rate

from advrag.datasets.loaders import load_qa
from advrag.engines.local.generation import HFGenerator, inference_copy
from advrag.engines.local.policy import LoraSettings, TrainablePolicy
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

MODES = ("fp32", "fp32-copy", "bf16-autocast", "bf16-copy")
COPIES = {"fp32-copy": torch.float32, "bf16-copy": torch.bfloat16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_precision.json"))
    args = parser.parse_args()
    offline_world()

    loaded = load_policy("smollm2", dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=16, alpha=32), cpu_bf16=True)
    copies = {mode: dtype for mode, dtype in COPIES.items() if mode in args.modes}
    copy_s = {mode: [] for mode in copies}
    settings = {"temperature": 1.0, "batch_size": args.batch}
    generators = {}
    for mode in args.modes:
        if mode in copies:
            start = time.perf_counter()
            sampler = inference_copy(policy.model, copies[mode])
            copy_s[mode].append(time.perf_counter() - start)
            generators[mode] = HFGenerator(sampler, loaded.tokenizer, **settings)
        elif mode == "bf16-autocast":
            generators[mode] = HFGenerator(policy.model, loaded.tokenizer,
                                           autocast=policy.autocast, **settings)
        else:
            generators[mode] = HFGenerator(policy.model, loaded.tokenizer, **settings)
    retriever = load_retriever(args.index)
    questions = [r.question for r in load_qa(Path("data/world/train.jsonl"), limit=args.batch)]
    rates = {mode: [] for mode in generators}
    for repeat in range(args.repeats):
        for mode, generator in generators.items():
            torch.manual_seed(repeat)
            rates[mode].append(rollout_rate(generator, questions, retriever, args))
            print(f"repeat {repeat + 1}/{args.repeats} {mode}: {rates[mode][-1]:.1f} tokens/s",
                  flush=True)
        for mode, dtype in copies.items():
            start = time.perf_counter()
            generators[mode].model = inference_copy(policy.model, dtype)
            copy_s[mode].append(time.perf_counter() - start)
    medians = {mode: statistics.median(r) for mode, r in rates.items()}
    write_report(args.out, {
        "model": "smollm2 + LoRA r16", "batch": args.batch, "repeats": args.repeats,
        "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens,
        "bf16_native": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "tokens_per_s": rates, "median_tokens_per_s": medians,
        "ratio_to_first_mode": {mode: m / medians[args.modes[0]] for mode, m in medians.items()},
        "copy_s": copy_s,
        "median_copy_s": {mode: statistics.median(t) for mode, t in copy_s.items()},
    })


if __name__ == "__main__":
    main()
