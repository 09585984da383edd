"""CPU attention kernels by micro-batch width: SDPA's math and flash kernels, and the block kernels.

    python bench/updates/bench_attention.py [--widths 64 128 256 512 1024] [--repeats 3]

One forward + backward of SmolLM2-135M with LoRA r=16 under bf16 autocast (the
update's pass: log-probs of the last 32 positions), 4 rows per micro-batch,
causal without a mask (as the update runs right-padded rows), with SDPA's flash
kernel, its math kernel, and — on a CPU with AVX512-BF16 — ``attention.amx_attention``
(forward and backward on the block kernels: AMX tiles where the CPU has them, else
AVX512-BF16 dot products; the column ``amx``, after the setting), interleaved. The math/flash crossover
sets ``logprobs.MATH_ATTENTION_MAX_WIDTH`` (math below it, the default above).
Writes ``bench/results/attention.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH, "amx": None}


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


def pass_seconds(policy, width: int, kernel: SDPBackend | None) -> float:
    """Seconds of one forward + backward over 4 rows of ``width`` tokens (``kernel`` None:
    the block kernels)."""
    from advrag.engines.local.attention import amx_attention

    ids = torch.randint(100, 40_000, (4, width))
    chosen = amx_attention(policy.model) if kernel is None else sdpa_kernel([kernel])
    started = time.perf_counter()
    with chosen, policy.autocast():
        logits = policy.model(input_ids=ids).logits[:, -32:].float()
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
    from advrag.engines.local.attention import kernel as amx_kernel

    kernels = {name: k for name, k in KERNELS.items() if k is not None or amx_kernel() is not None}
    for kernel in kernels.values():  # first-call set-up, untimed
        pass_seconds(policy, 64, kernel)
    rows = []
    for width in args.widths:
        seconds = {name: [] for name in kernels}
        for _ in range(args.repeats):
            for name, kernel in kernels.items():
                seconds[name].append(pass_seconds(policy, width, kernel))
        median = {name: statistics.median(values) for name, values in seconds.items()}
        row = {"width": width, **{f"{name}_s": m for name, m in median.items()},
               "math_over_flash": median["math"] / median["flash"]}
        if "amx" in median:
            row["best_sdpa_over_amx"] = min(median["math"], median["flash"]) / median["amx"]
        rows.append(row | {"runs": seconds})
        print(f"width {width:5d}: " + ", ".join(f"{n} {m:.3f} s" for n, m in median.items())
              + f", math/flash {row['math_over_flash']:.2f}"
              + (f", best SDPA/amx {row['best_sdpa_over_amx']:.2f}" if "amx" in median else ""),
              flush=True)
    from advrag.engines.local.attention import amx_tiles

    block_math = "amx tiles" if amx_tiles() else "avx512-bf16 dot products"
    write_report(args.out, {"command": "python bench/updates/bench_attention.py", "rows": rows,
                            "block_math": block_math if "amx" in kernels else None,
                            "settings": vars(args) | {"out": str(args.out)}})


if __name__ == "__main__":
    main()
