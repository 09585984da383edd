"""ARR joint-step time split: rollout / scoring / update per agent, on the offline world.

    python bench/steps/bench_arr.py --model tiny      # a tiny random model built here (seconds)
    python bench/steps/bench_arr.py --model smollm2   # SmolLM2-135M, configs/arr.yaml's recipe
    python bench/steps/bench_arr.py --model smollm2 --warmup   # after the config's SFT warm-up

Runs ``--steps`` joint updates (the first is a warm-up and is reported apart)
through the same engine calls as the `adversarial_rl` flow (no Prefect, no
MLflow), with the shared-base LoRA layout and the config's rollout settings,
on data/world and processed/index. Prints and writes
bench/results/arr_step_<model>.json: median seconds of each part over the
steps after the warm-up, the warm-up step's, peak RSS, and the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world, tiny_model
from reporting import cpu_description

PARTS = ("reasoner/time/rollout_s", "verifier/time/rollout_s", "time/retrieval_s",
         "reasoner/time/score_s", "verifier/time/score_s", "reasoner/time/update_s",
         "verifier/time/update_s", "time/push_s", "time/step_s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny", help="'tiny', 'smollm2' or a model directory")
    parser.add_argument("--config", type=Path, default=Path("configs/arr.yaml"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--warmup", action="store_true",
                        help="run the config's SFT warm-up first (timed) and train from it")
    args = parser.parse_args()

    from advrag.config import load_config
    from advrag.datasets.loaders import load_qa
    from advrag.recipes.arr import ArrConfig, ArrRecipe
    from advrag.recipes.arr.step import arr_step
    from advrag.retrieval.retriever import load_retriever

    offline_world()
    config = load_config(args.config, ArrConfig)
    scratch = tempfile.TemporaryDirectory()
    model = args.model
    if model == "tiny":
        model = str(tiny_model(config.world_dir, Path(scratch.name) / "tiny"))
        config = config.model_copy(update={
            "cpu_bf16": False, "optim": config.optim.model_copy(update={"max_seq_len": 4096})})
    config = config.model_copy(update={"model": model,
                                       "checkpoint_dir": Path(scratch.name) / "checkpoints"})
    retriever = load_retriever(config.index_dir)
    records = load_qa(config.world_dir / "train.jsonl")
    recipe, warmup = ArrRecipe(config), {}
    if args.warmup and config.warmup is not None:
        started = time.perf_counter()
        warm_dir, history = recipe.warm_up(retriever, records)
        warmup = {"seconds": time.perf_counter() - started, "sft_steps": len(history),
                  "first_loss": history[0]["loss"], "last_loss": history[-1]["loss"]}
        print(f"warm-up: {warmup}", flush=True)
        model = str(warm_dir)
    recipe.build(model)
    steps = []
    for step in range(args.steps):
        batch = records[step * config.questions_per_step:(step + 1) * config.questions_per_step]
        steps.append(arr_step(recipe.trainers, recipe.generators, retriever, batch, config).metrics)
        print(f"step {step}: " + ", ".join(f"{p} {steps[-1][p]:.2f}" for p in PARTS), flush=True)
    later = steps[1:] or steps
    result = {
        "model": args.model,
        "median_s": {p: statistics.median(s[p] for s in later) for p in PARTS},
        "warmup_step_s": {p: steps[0][p] for p in PARTS},
        "tokens": {a: statistics.median(s[f"{a}/tokens"] for s in later)
                   for a in ("reasoner", "verifier")},
        "warmup": warmup,
        "learning": {k: [s[k] for s in steps] for k in (
            "reasoner/reward_std", "verifier/reward_std", "reasoner/f1", "verifier/f1",
            "final/f1", "verifier/critique_actions", "verifier/clarity_nonzero_fraction")},
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "settings": {k: getattr(config, k) for k in (
            "group_size", "questions_per_step", "max_turns", "topk", "max_new_tokens",
            "policies", "cpu_bf16")} | {"lora": config.lora.model_dump() if config.lora else None,
                                        "steps": args.steps},
        "machine": {"cpu": cpu_description(),
                    "threads": torch.get_num_threads(),
                    "load_average_1m_at_end": os.getloadavg()[0]},  # shared cores inflate times
    }
    out = args.out or Path(f"bench/results/arr_step_{Path(args.model).name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_s"], indent=2))


if __name__ == "__main__":
    main()
