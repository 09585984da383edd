"""One GRPO update on rollouts of mixed lengths: micro-batches in batch order vs by length.

    python bench/bench_update.py [--batch 16] [--micro-batch 4] [--repeats 3]

Trajectories are laid out as Search-R1 rollouts of world text (prompt, then
0–2 rounds of 64 policy tokens + ~400 tokens of retrieved passages, then a
64-token answer), so lengths differ as they do in a real step. The same
``LocalTrainer`` (SmolLM2-135M + LoRA r=16, bf16 where the CPU has it, the
train config's micro-batch of 4) updates on them with its micro-batches
formed two ways, interleaved in one process: in batch order (before) and
grouped by length (``logprobs.micro_batches``, now). Reported per way: median
update seconds, real tokens, token positions computed (padding included) and
6·N·T GFLOP/s on the real tokens, against the bf16 matmul peak of this run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from reporting import write_report

PROMPT, POLICY, PASSAGES = 150, 64, 400


def world_ids(tokenizer) -> list[int]:
    """Token ids of the world's passages (the text every segment is cut from)."""
    lines = Path("data/world/corpus.jsonl").read_text().splitlines()
    text = " ".join(json.loads(line)["contents"] for line in lines[:300])
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def rollouts(tokenizer, batch: int):
    """``batch`` trajectories with 0, 1 or 2 search rounds in turn (lengths ~280 to ~1200)."""
    from advrag.agents.types import Trajectory

    ids, cursor, out = world_ids(tokenizer), 0, []

    def take(n: int) -> str:
        nonlocal cursor
        cursor += n
        return tokenizer.decode(ids[cursor - n : cursor])

    for i in range(batch):
        traj = Trajectory()
        traj.add(take(PROMPT), "prompt")
        for _ in range(i % 3):
            traj.add(take(POLICY), "policy")
            traj.add(take(PASSAGES), "env")
        traj.add(take(POLICY), "policy")
        out.append(traj)
    return out


def in_batch_order(attention_mask: torch.Tensor, micro_batch_size: int) -> list[torch.Tensor]:
    """The former micro-batching: consecutive rows, whatever their lengths."""
    return list(torch.arange(attention_mask.shape[0]).split(micro_batch_size))


def bf16_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Median bf16 GFLOP/s of an n×n matmul (2·n³ FLOPs)."""
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def computed_positions(trainer, trajectories, strategy) -> int:
    """Token positions the forward passes run over (each micro-batch padded to its longest)."""
    mask = trainer.encode(trajectories).attention_mask
    return sum(len(index) * int(mask[index].sum(dim=1).max())
               for index in strategy(mask, trainer.config.micro_batch_size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/update.json"))
    args = parser.parse_args()

    from advrag.engines.local import logprobs
    from advrag.engines.local import trainer as trainer_module
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy

    loaded = load_policy("smollm2")
    n_params = sum(p.numel() for p in loaded.model.parameters())
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=16, alpha=32),
                             keep_reference=False, cpu_bf16=True)
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(
        lr=1e-5, kl_coef=0.0, micro_batch_size=args.micro_batch, max_seq_len=2048, group_size=4))
    trajectories = rollouts(loaded.tokenizer, args.batch)
    scores = torch.arange(args.batch, dtype=torch.float32) % 3
    groups = [i // 4 for i in range(args.batch)]
    strategies = {"batch order": in_batch_order, "by length": logprobs.micro_batches}
    times: dict[str, list[float]] = {name: [] for name in strategies}
    tokens = 0.0
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, strategy in strategies.items():
            logprobs.micro_batches = trainer_module.micro_batches = strategy
            start = time.perf_counter()
            tokens = trainer.update(trajectories, scores, groups).metrics["tokens"]
            if repeat:
                times[name].append(time.perf_counter() - start)
    logprobs.micro_batches = trainer_module.micro_batches = strategies["by length"]
    peak = bf16_peak_gflops()
    rows = {name: {"update_s": statistics.median(t), "real_tokens": tokens,
                   "computed_positions": computed_positions(trainer, trajectories,
                                                            strategies[name]),
                   "gflops_6NT": 6 * n_params * tokens / statistics.median(t) / 1e9}
            for name, t in times.items()}
    for row in rows.values():
        row["share_of_bf16_peak"] = row["gflops_6NT"] / peak
    write_report(args.out, {
        "bench": "bench/bench_update.py", "batch": args.batch, "micro_batch": args.micro_batch,
        "bf16_cpu": policy.cpu_bf16, "bf16_matmul_peak_gflops": peak, "rows": rows,
        "speedup_by_length": rows["batch order"]["update_s"] / rows["by length"]["update_s"],
    })


if __name__ == "__main__":
    main()
