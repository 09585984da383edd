"""Training-step throughput and memory of the local engine: SmolLM2-135M, full vs LoRA.

    python bench/updates/bench_train.py [--batch 8] [--seq 256] [--repeats 3]

Each mode runs in its own subprocess (so peak RSS is per mode), after one
warm-up update: median seconds per ``LocalTrainer.update`` on ``batch``
trajectories of ``seq`` tokens (all policy tokens, kl_coef 0), tokens/s, and
model-FLOP utilisation 6·params·tokens / step time against this machine's
fp32 matmul peak measured in the same run. For LoRA the same 6·N·T count is
reported (the backward still runs through the frozen weights).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import matmul_peak_gflops


def synthetic_trajectories(tokenizer, batch: int, seq: int):
    """``batch`` trajectories of exactly ``seq`` policy tokens of world text."""
    from advrag.agents.types import Trajectory

    corpus = Path("data/world/corpus.jsonl").read_text().split("\n")
    text = " ".join(json.loads(line)["contents"] for line in corpus[:50] if line)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    trajectories = []
    for i in range(batch):
        traj = Trajectory()
        traj.add(tokenizer.decode(ids[i * seq : (i + 1) * seq]), "policy")
        trajectories.append(traj)
    return trajectories


def run_mode(mode: str, batch: int, seq: int, repeats: int, cpu_bf16: bool) -> dict:
    """Time ``repeats`` updates in this process (after a warm-up)."""
    import torch

    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy

    loaded = load_policy("smollm2")
    n_params = sum(p.numel() for p in loaded.model.parameters())
    lora = LoraSettings(r=16, alpha=32) if mode == "lora" else None
    policy = TrainablePolicy(loaded.model, lora=lora, keep_reference=False, cpu_bf16=cpu_bf16)
    trainer = LocalTrainer(
        policy,
        loaded.tokenizer,
        TrainConfig(
            lr=1e-5, kl_coef=0.0, micro_batch_size=batch, max_seq_len=seq + 8
        ),
    )
    trajectories = synthetic_trajectories(loaded.tokenizer, batch, seq)
    scores = torch.arange(batch, dtype=torch.float32) % 2
    groups = [i // 2 for i in range(batch)]
    trainer.update(trajectories, scores, groups)  # warm-up
    times, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        metrics = trainer.update(trajectories, scores, groups).metrics
        times.append(time.perf_counter() - start)
        tokens = metrics["tokens"]
    step = statistics.median(times)
    return {
        "mode": mode + ("+bf16" if policy.cpu_bf16 else ""),
        "params": n_params,
        "tokens": tokens,
        "step_s": step,
        "tokens_per_s": tokens / step,
        "model_gflops": 6 * n_params * tokens / step / 1e9,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=["full", "lora"], help="internal: run one mode")
    parser.add_argument("--cpu-bf16", action="store_true", help="also run bf16 autocast rows")
    parser.add_argument("--out", type=Path, default=Path("bench/results/train.json"))
    args = parser.parse_args()
    offline_world()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.batch, args.seq, args.repeats, args.cpu_bf16)))
        return
    peak = matmul_peak_gflops("float32")
    rows = []
    variants = [
        (m, b) for b in ([False, True] if args.cpu_bf16 else [False]) for m in ("full", "lora")
    ]
    for mode, bf16 in variants:
        cmd = [
            sys.executable,
            __file__,
            "--mode",
            mode,
            "--batch",
            str(args.batch),
            "--seq",
            str(args.seq),
            "--repeats",
            str(args.repeats),
        ] + (["--cpu-bf16"] if bf16 else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row | {"mfu": row["model_gflops"] / peak})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"fp32_matmul_peak_gflops": peak, "rows": rows}, indent=2))
    print(f"fp32 matmul peak: {peak:.0f} GFLOP/s\n")
    print(
        "| mode | tokens/step | step s (median) | tokens/s | 6·N·T GFLOP/s | MFU | peak RSS GiB |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['tokens']:.0f} | {r['step_s']:.2f} | {r['tokens_per_s']:.0f} | "
            f"{r['model_gflops']:.0f} | {r['mfu']:.0%} | {r['peak_rss_gib']:.2f} |"
        )


if __name__ == "__main__":
    main()
