"""One AdamW step over SmolLM2-135M's weights: torch's per-tensor loop, foreach, and fused.

    python bench/updates/bench_optimizer.py [--repeats 5]

Full fine-tuning steps the optimizer over every weight once per update; the
trainer uses the fused kernel (``policy.adamw``). Gradients are random (the
step's cost does not depend on their values); the three ways run interleaved
in one process on the same parameters, medians of ``--repeats`` after one
warm-up step each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

WAYS = {"per-tensor loop": {"foreach": False}, "foreach": {"foreach": True},
        "fused": {"fused": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/optimizer.json"))
    args = parser.parse_args()

    from advrag.models.loading import load_policy

    params = [p for p in load_policy("smollm2", dtype="float32").model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizers = {name: torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01, **options)
                  for name, options in WAYS.items()}
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    for repeat in range(args.repeats + 1):  # the first round warms up (allocates the state)
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            optimizer.step()
            if repeat:
                times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    write_report(args.out, {
        "bench": "bench/updates/bench_optimizer.py", "weights": sum(p.numel() for p in params),
        "threads": torch.get_num_threads(), "step_s": seconds,
        "speedup_fused_over_loop": seconds["per-tensor loop"] / seconds["fused"],
    })


if __name__ == "__main__":
    main()
