"""When `compile_update` pays: SFT warm-up updates eager vs compiled, each in its own process.

Runs the warm-up of a config (default `configs/train.yaml`: LoRA, batch 8, bf16 where native)
on ``--sequences`` demonstrations twice — eager, then compiled with an empty inductor cache (a
fresh ``TORCHINDUCTOR_CACHE_DIR``) — and times every update. The compile's cost is the
compiled run's first update less the eager run's first; the saving per sequence is the
difference of the median later updates over the batch size; their ratio is the break-even
run length that `compile_update: auto`'s threshold (``AUTO_COMPILE_MIN_SEQUENCES``) is set from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report


def time_updates(config_path: Path, sequences: int, compiled: bool) -> list[float]:
    """Seconds of each SFT update over ``sequences`` demonstrations, in this process."""
    from advrag.config import load_config
    from advrag.curation.demonstrations import build_demonstrations
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local.generation import HFGenerator
    from advrag.engines.local.policy import TrainablePolicy
    from advrag.engines.local.sft import supervised_finetune
    from advrag.engines.local.trainer import seed_everything
    from advrag.models.loading import load_policy
    from advrag.recipes.grpo import GrpoConfig
    from advrag.retrieval.retriever import load_retriever

    config = load_config(config_path, GrpoConfig)
    seed_everything(config.warmup.sft.seed)
    loaded = load_policy(config.model, dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=config.lora, keep_reference=False,
                             cpu_bf16=config.cpu_bf16, compile_update=compiled)
    demos = build_demonstrations(
        load_qa(config.world_dir / "train.jsonl"), load_retriever(config.index_dir),
        HFGenerator(policy.model, loaded.tokenizer).chat_prompt, topk=config.topk,
        max_turns=config.max_turns, limit=sequences)
    ends = [time.perf_counter()]
    supervised_finetune(policy, loaded.tokenizer, demos,
                        config.warmup.sft.model_copy(update={"epochs": 1}),
                        on_step=lambda step, metrics: ends.append(time.perf_counter()))
    return [b - a for a, b in zip(ends, ends[1:])]


def run_mode(config: Path, sequences: int, compiled: bool) -> list[float]:
    """``time_updates`` in a child process (compiled: with an empty inductor cache)."""
    with tempfile.TemporaryDirectory() as cache:
        env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": cache}
        out = subprocess.run(
            [sys.executable, __file__, "--config", str(config), "--sequences", str(sequences),
             "--child", "compiled" if compiled else "eager"],
            env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def payback(eager: list[float], compiled: list[float], batch_size: int) -> dict:
    """Compile cost, saving per sequence and break-even sequences from two runs' update times."""
    cost = compiled[0] - eager[0]
    saving = (statistics.median(eager[1:]) - statistics.median(compiled[1:])) / batch_size
    return {"compile_cost_s": cost, "saving_per_sequence_s": saving,
            "break_even_sequences": cost / saving if saving > 0 else None,
            "speedup_after_compile": statistics.median(eager[1:]) / statistics.median(compiled[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/train.yaml"))
    parser.add_argument("--sequences", type=int, default=48, help="Demonstrations (≥ 2 updates).")
    parser.add_argument("--child", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("bench/results/compile_payback.json"))
    args = parser.parse_args()
    offline_world()
    if args.child:
        print(json.dumps(time_updates(args.config, args.sequences, args.child == "compiled")))
        return

    from advrag.config import load_config
    from advrag.engines.local.policy import AUTO_COMPILE_MIN_SEQUENCES
    from advrag.recipes.grpo import GrpoConfig

    batch_size = load_config(args.config, GrpoConfig).warmup.sft.batch_size
    eager = run_mode(args.config, args.sequences, compiled=False)
    compiled = run_mode(args.config, args.sequences, compiled=True)
    write_report(args.out, {
        "bench": "bench/updates/bench_compile_payback.py", "config": str(args.config),
        "sequences": args.sequences, "batch_size": batch_size,
        "update_s": {"eager": eager, "compiled": compiled},
        **payback(eager, compiled, batch_size),
        "auto_compile_min_sequences": AUTO_COMPILE_MIN_SEQUENCES,
    })


if __name__ == "__main__":
    main()
