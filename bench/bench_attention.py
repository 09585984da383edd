"""CPU attention kernels by micro-batch width: where SDPA's math kernel beats its flash kernel.

    python bench/bench_attention.py [--widths 64 128 256 512 1024] [--repeats 3]

One forward + backward of SmolLM2-135M with LoRA r=16 under bf16 autocast (the
update's pass: log-probs of the last 32 positions), 4 rows per micro-batch, one
row in five padded as in a length-grouped micro-batch, once with SDPA's flash
kernel and once with its math kernel, interleaved. The crossover sets
``logprobs.MATH_ATTENTION_MAX_WIDTH`` (math below it, the default above).
Writes ``bench/results/attention.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from reporting import write_report
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}


def lora_policy():
    """SmolLM2 with a LoRA adapter (B random, so every gradient path is real), bf16 autocast."""
    from advrag.config.engine import LoraSettings
    from advrag.engines.local.policy import TrainablePolicy
    from advrag.models.loading import load_policy

    policy = TrainablePolicy(load_policy("smollm2", dtype="float32").model,
                             lora=LoraSettings(r=16, alpha=32), keep_reference=False,
                             cpu_bf16=True)
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.01)
    policy.model.train()
    return policy


def pass_seconds(policy, width: int, kernel: SDPBackend) -> float:
    """Seconds of one forward + backward over 4 rows of ``width`` tokens (the last row padded)."""
    ids = torch.randint(100, 40_000, (4, width))
    mask = torch.ones_like(ids)
    mask[-1, -(width // 5):] = 0
    started = time.perf_counter()
    with sdpa_kernel([kernel]), policy.autocast():
        logits = policy.model(input_ids=ids, attention_mask=mask).logits[:, -32:].float()
    logits.logsumexp(-1).sum().backward()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", nargs="+", type=int, default=[64, 128, 256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/attention.json"))
    args = parser.parse_args()
    policy = lora_policy()
    if not policy.cpu_bf16:
        raise SystemExit("this CPU has no native bf16: the update runs fp32 here, nothing to measure")
    pass_seconds(policy, 64, SDPBackend.MATH)  # first-call set-up, untimed
    rows = []
    for width in args.widths:
        seconds = {name: [] for name in KERNELS}
        for _ in range(args.repeats):
            for name, kernel in KERNELS.items():
                seconds[name].append(pass_seconds(policy, width, kernel))
        median = {name: statistics.median(values) for name, values in seconds.items()}
        rows.append({"width": width, "flash_s": median["flash"], "math_s": median["math"],
                     "math_over_flash": median["math"] / median["flash"], "runs": seconds})
        print(f"width {width:5d}: flash {median['flash']:.3f} s, math {median['math']:.3f} s, "
              f"math/flash {median['math'] / median['flash']:.2f}", flush=True)
    write_report(args.out, {"command": "python bench/bench_attention.py", "rows": rows,
                            "settings": vars(args) | {"out": str(args.out)}})


if __name__ == "__main__":
    main()
