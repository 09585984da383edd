"""How long an SFT warm-up it takes before SmolLM2 follows the Search-R1 grammar.

    python bench/learning/bench_warmup.py [--config configs/train.yaml] [--epochs 3] [--limit 32]
                                 [--demonstrations N]   # default: the config's

GRPO learns nothing while every rollout of a question scores the same (all
broken grammar: reward −0.2, advantage 0). This runs the train config's
warm-up (its demonstrations, LoRA and SFT settings) for ``--epochs`` passes and
saves the merged model after each; then the benchmark flow scores the base and
every snapshot with the Search-R1 agent on the same held-out questions: format
errors per question, searches, retrieval recall and EM/F1 with bootstrap 95 %
intervals. Writes ``bench/results/warmup.json``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from advrag.config import BenchmarkConfig, load_config
from advrag.curation.demonstrations import build_demonstrations
from advrag.datasets.loaders import load_qa
from advrag.engines.local.dual import export_policy
from advrag.engines.local.generation import HFGenerator
from advrag.engines.local.sft import supervised_finetune
from advrag.flows.benchmark import benchmark
from advrag.recipes.base import trainable_policy
from advrag.recipes.grpo import GrpoConfig
from advrag.retrieval.retriever import load_retriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

COLUMNS = ("em", "em_lo", "em_hi", "f1", "format_errors", "n_searches", "retrieval_recall")


def snapshots(config: GrpoConfig, epochs: int, out: Path) -> tuple[list[dict], list[Path]]:
    """SFT for ``epochs`` passes; the merged model after each pass. Returns (history, dirs)."""
    policy, tokenizer = trainable_policy(config.model, config, keep_reference=False,
                                         sequences=config.warmup.demonstrations * epochs)
    demos = build_demonstrations(
        load_qa(config.world_dir / "train.jsonl"), load_retriever(config.index_dir),
        HFGenerator(policy.model, tokenizer).chat_prompt, topk=config.topk,
        max_turns=config.max_turns, limit=config.warmup.demonstrations)
    sft = config.warmup.sft.model_copy(update={"epochs": epochs})
    per_epoch = math.ceil(len(demos) / sft.batch_size)
    dirs: list[Path] = []

    def save_at_epoch_end(step: int, metrics: dict[str, float]) -> None:
        if (step + 1) % per_epoch == 0:
            dirs.append(export_policy(policy, tokenizer, out / f"after-{step + 1}-steps"))
            print(f"saved after {step + 1} SFT steps (loss {metrics['loss']:.3f})", flush=True)

    history = supervised_finetune(policy, tokenizer, demos, sft, on_step=save_at_epoch_end)
    return history, dirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=32, help="held-out questions scored")
    parser.add_argument("--demonstrations", type=int, default=None,
                        help="override the config's warm-up demonstrations")
    parser.add_argument("--out", type=Path, default=Path("bench/results/warmup.json"))
    args = parser.parse_args()
    offline_world()
    config = load_config(args.config, GrpoConfig)
    if args.demonstrations is not None:
        config = config.model_copy(update={"warmup": config.warmup.model_copy(
            update={"demonstrations": args.demonstrations})})
    scratch = Path(tempfile.mkdtemp(prefix="advrag-warmup-"))
    try:
        started = time.perf_counter()
        history, dirs = snapshots(config, args.epochs, scratch)
        sft_s = time.perf_counter() - started
        evaluate = config.evaluate or BenchmarkConfig(methods=["search_r1"])
        rows = {}
        for model in [config.model, *map(str, dirs)]:
            name = Path(model).name
            scored = benchmark(BenchmarkConfig(**evaluate.model_copy(update={
                "model": model, "methods": ["search_r1"], "limit": args.limit,
                "experiment": "advrag-bench-warmup"}).model_dump()), run_name=name)
            summary = scored["results"][("search_r1", "world")]
            rows[name] = {k: summary[k] for k in COLUMNS}
            print(f"{name}: " + ", ".join(f"{k} {rows[name][k]:.3f}" for k in COLUMNS), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {"command": f"python bench/learning/bench_warmup.py --config {args.config} "
                         f"--epochs {args.epochs} --limit {args.limit} "
                         f"--demonstrations {config.warmup.demonstrations}",
              "sft": {"steps": len(history), "seconds": sft_s,
                      "loss": [round(h["loss"], 4) for h in history]},
              "held_out_search_r1": rows}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
