"""The OpenMP wait policy against three workloads: what ``OMP_WAIT_POLICY=PASSIVE`` costs.

    python bench/runtime/bench_omp_wait.py [--rounds 2] [--repeats 3] [--workloads ...]

The policy is read once, when the OpenMP runtime starts, so every measurement
is a child process of this script, run with ``OMP_WAIT_POLICY=PASSIVE`` and
with the variable unset (libgomp's default: idle threads spin briefly, then
sleep), alternating, ``--rounds`` times. Workloads (SmolLM2-135M, bf16 where
the CPU has it, micro-batch 4, one warm-up call each):

- ``update-short-full`` / ``update-short-lora``: one GRPO update of 16 short
  rows (a chat-templated train question + 15–32 words of world text, ~80
  tokens each), the rows ``bench/steps/bench_trl.py`` trains on;
- ``update-long-lora``: one update of 8 Search-R1-shaped rollouts of 280–1200
  tokens (``bench/updates/bench_update.py``'s);
- ``generate``: transformers sampling from a bf16 copy, 16 chat prompts × 32
  new tokens (the rollout back-end without vLLM).

Reports each child's median seconds, the median over rounds, and PASSIVE / default.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import median_seconds, write_report

ROOT = Path(__file__).resolve().parents[2]
POLICIES = {"PASSIVE": "PASSIVE", "default": None}
WORKLOADS = ["update-short-full", "update-short-lora", "update-long-lora", "generate"]


def questions(n: int) -> list[str]:
    """The first ``n`` questions of the world's train split."""
    from advrag.datasets.loaders import load_qa

    return [r.question for r in load_qa(ROOT / "data/world/train.jsonl")[:n]]


def short_rows(tokenizer, n: int = 16) -> list:
    """``n`` trajectories: a chat-templated question (4 questions × 4) + 15–32 corpus words."""
    from advrag.agents.types import Trajectory

    rng = random.Random(0)
    words = (ROOT / "data/world/corpus.jsonl").read_text().split()[:5000]
    out = []
    for question in [q for q in questions(n // 4) for _ in range(4)]:
        trajectory = Trajectory()
        trajectory.add(tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False),
            "prompt")
        trajectory.add(" ".join(rng.sample(words, rng.randint(15, 32))), "policy")
        out.append(trajectory)
    return out


def timed(call, repeats: int) -> float:
    """Median wall seconds of ``call()`` over ``repeats`` calls after one warm-up call."""
    call()
    return median_seconds(call, repeats)[0]


def run_workload(name: str, repeats: int) -> float:
    """Median seconds of one call of workload ``name`` in this process."""
    import torch
    from inputs import search_r1_rollouts

    from advrag.engines.generators import make_generator
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy

    loaded = load_policy("smollm2")
    lora = None if name.endswith("full") else LoraSettings(r=16, alpha=32)
    policy = TrainablePolicy(loaded.model, lora=lora, keep_reference=False, cpu_bf16=True)
    if name == "generate":
        generator = make_generator("hf", policy.model, loaded.tokenizer, loaded.source,
                                   temperature=1.0, batch_size=16, autocast=policy.autocast)
        prompts = [generator.chat_prompt(q) for q in questions(4) for _ in range(4)]
        return timed(lambda: generator.generate(prompts, max_new_tokens=32), repeats)
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(
        lr=1e-6, kl_coef=0.0, micro_batch_size=4, max_seq_len=2048))
    rows = (short_rows(loaded.tokenizer) if "short" in name
            else search_r1_rollouts(loaded.tokenizer, 8))
    scores = torch.arange(len(rows), dtype=torch.float32) % 3
    groups = [i // 4 for i in range(len(rows))]
    return timed(lambda: trainer.update(rows, scores, groups), repeats)


def child_run(workload: str, env: dict[str, str], repeats: int, out: Path) -> dict:
    """Run ``workload`` in a child process under ``env``: its median seconds, its peak resident
    memory and the allocator it ran on."""
    subprocess.run([sys.executable, __file__, "--child", workload, "--repeats", str(repeats),
                    "--child-out", str(out)], check=True, cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())


def policy_env(policy: str | None) -> dict[str, str]:
    """This environment with ``OMP_WAIT_POLICY`` set to ``policy`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return env if policy is None else env | {"OMP_WAIT_POLICY": policy}


def alternating_parser(doc: str, out: Path) -> argparse.ArgumentParser:
    """The options of a benchmark that alternates child processes over these workloads."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=out)
    return parser


def main() -> None:
    parser = alternating_parser(__doc__, Path("bench/results/omp_wait.json"))
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    offline_world()
    if args.child:
        sys.path.insert(0, str(ROOT))
        from advrag.common.allocator import allocator_in_use

        seconds = run_workload(args.child, args.repeats)
        peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
        args.child_out.write_text(json.dumps({"seconds": seconds, "peak_rss_gib": peak_gib,
                                              "allocator": allocator_in_use()}))
        return
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads:
            runs = {name: [] for name in POLICIES}
            for _ in range(args.rounds):
                for name, policy in POLICIES.items():
                    runs[name].append(child_run(workload, policy_env(policy), args.repeats,
                                                Path(tmp) / "child.json")["seconds"])
                    print(f"{workload} {name}: {runs[name][-1]:.2f} s", flush=True)
            medians = {name: statistics.median(runs[name]) for name in POLICIES}
            rows[workload] = {"seconds": runs, "median_s": medians,
                              "passive_over_default": medians["PASSIVE"] / medians["default"]}
    write_report(args.out, {"bench": "bench/runtime/bench_omp_wait.py", "repeats": args.repeats,
                            "rounds": args.rounds, "rows": rows})


if __name__ == "__main__":
    main()
