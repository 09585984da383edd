"""How a GRPO step's time and memory grow with group size, turns, batch and length (issue 11, target 5).

    python bench/steps/bench_cost_growth.py [--backend vllm|hf] [--model DIR] [--steps 1]
                                      [--compile-update] [--only group_size=8 ...]

One factor at a time around the base setting (group 4, 2 turns, 16 trajectories,
64 new tokens per call): group size 2/4/8, turns 1/2/4, trajectories per step
8/16/32, new tokens per call 32/64/128. Each setting runs in its own
subprocess (its peak RSS is the setting's): SmolLM2-135M + LoRA r=16 as the
train flow builds it (``--model``: a warmed-up checkpoint, so rollouts search
and contexts grow as in training), bf16 sampling on ``--backend``, then one
untimed warm-up step and ``--steps`` timed GRPO steps (rollout → F1 reward →
LoRA update → weight push; ``--compile-update``: the update's decoder layers compiled, the
compile falling in the untimed step). Reported per setting: step seconds (median) split
into rollout / update, trajectory tokens the update processed, searches per
trajectory, peak RSS. Results: ``bench/results/cost_growth.json``.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import child_json, write_report

BASE = {"group_size": 4, "max_turns": 2, "trajectories": 16, "max_new_tokens": 64}
SWEEP = {"group_size": [2, 4, 8], "max_turns": [1, 2, 4], "trajectories": [8, 16, 32],
         "max_new_tokens": [32, 64, 128]}


def settings_list(only: list[str]) -> list[dict]:
    """The base setting, then each factor's other values with the rest at base."""
    rows = [dict(BASE)]
    for factor, values in SWEEP.items():
        rows += [BASE | {factor: v} for v in values if v != BASE[factor]]
    if only:
        wanted = [dict(BASE | {k: int(v)}) for k, v in (item.split("=") for item in only)]
        rows = [r for r in rows if r in wanted]
    return rows


def run_setting(setting: dict, args) -> dict:
    """Build the policy and generator, one warm-up step, ``args.steps`` timed steps."""
    from advrag.core.rewards import answer_reward
    from advrag.datasets.loaders import load_qa
    from advrag.engines.generators import make_generator
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy
    from advrag.recipes.rollout import RolloutSettings
    from advrag.recipes.search_agent.step import grpo_step
    from advrag.retrieval.retriever import load_retriever

    loaded = load_policy(args.model, dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=16, alpha=32), cpu_bf16=True,
                             compile_update=args.compile_update)
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(
        lr=5e-5, micro_batch_size=4, max_seq_len=2048,
        kl_coef=0.0))
    generator = make_generator(args.backend, policy.model, loaded.tokenizer, loaded.source,
                               temperature=1.0, batch_size=64, autocast=policy.autocast,
                               **({"compile_rollout": False} if args.backend == "vllm" else {}))
    retriever = load_retriever(args.index)
    records = load_qa(Path("data/world/train.jsonl"))
    per_step = setting["trajectories"] // setting["group_size"]
    settings = RolloutSettings(max_turns=setting["max_turns"], topk=3,
                               max_new_tokens=setting["max_new_tokens"])

    def reward(trajectory, record) -> float:
        return answer_reward(trajectory.answer, record.golden_answers,
                             format_errors=trajectory.format_errors, metric="f1")

    steps = []
    for i in range(args.steps + 1):
        chunk = records[i * per_step:(i + 1) * per_step]
        started = time.perf_counter()
        metrics = grpo_step(trainer, generator, retriever, chunk,
                            group_size=setting["group_size"], reward_fn=reward,
                            settings=settings)
        steps.append({"step_s": time.perf_counter() - started, "rollout_s": metrics["rollout_s"],
                      "update_s": metrics["update_s"], "tokens": metrics["tokens"],
                      "searches": metrics["searches"]})
    timed = steps[1:]
    return setting | {
        "median_step_s": statistics.median(s["step_s"] for s in timed),
        "median_rollout_s": statistics.median(s["rollout_s"] for s in timed),
        "median_update_s": statistics.median(s["update_s"] for s in timed),
        "median_tokens": statistics.median(s["tokens"] for s in timed),
        "median_searches": statistics.median(s["searches"] for s in timed),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "steps": timed,
    }


def child_command(setting: dict, args) -> list[str]:
    """This script for one setting."""
    return [sys.executable, __file__, "--setting", json.dumps(setting), "--backend", args.backend,
            "--model", args.model, "--steps", str(args.steps), "--index", str(args.index),
            *(["--compile-update"] if args.compile_update else [])]


def print_table(rows: list[dict]) -> None:
    print("| group | turns | trajectories | new tokens | step s (rollout / update) | tokens "
          "| searches | peak RSS GiB |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['group_size']} | {r['max_turns']} | {r['trajectories']} | "
              f"{r['max_new_tokens']} | {r['median_step_s']:.1f} ({r['median_rollout_s']:.1f} / "
              f"{r['median_update_s']:.1f}) | {r['median_tokens']:.0f} | "
              f"{r['median_searches']:.2f} | {r['peak_rss_gib']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["hf", "vllm"], default="vllm")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--compile-update", action="store_true",
                        help="Compile the update's decoder layers (compile_update: true).")
    parser.add_argument("--only", nargs="*", default=[], help="factor=value settings to run")
    parser.add_argument("--setting", help="internal: run one setting (JSON)")
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/cost_growth.json"))
    args = parser.parse_args()
    offline_world()
    if args.setting:
        print(json.dumps(run_setting(json.loads(args.setting), args)))
        return
    rows = []
    for setting in settings_list(args.only):
        rows.append(child_json(child_command(setting, args))
                    | {"load_average_1m_after": os.getloadavg()[0]})
        print(f"{setting}: {rows[-1]['median_step_s']:.1f} s", flush=True)
    write_report(args.out, {"bench": "bench/steps/bench_cost_growth.py", "backend": args.backend,
                            "model": args.model, "steps": args.steps,
                            "compile_update": args.compile_update, "rows": rows})
    print_table(rows)


if __name__ == "__main__":
    main()
