"""When `compile_rollout` pays: Search-R1 rollouts on an eager vLLM-CPU engine vs its compiled graph.

    python bench/rollouts/bench_rollout_compile_payback.py [--batch 16] [--rounds 3] [--model DIR]

Three subprocesses sample the same Search-R1 episodes (``configs/train.yaml``'s
loop: 2 turns, 64 new tokens a call, top-3 retrieval over ``processed/index``;
``bench_rollout_replay.py``'s LoRA policy and engine settings): an eager engine,
then a compiled one with empty vLLM and inductor caches (a run's first start on
a machine), then a compiled one again on those now-filled caches (every later
start). Each starts its engine (timed), runs a first round of ``batch``
rollouts (which compiles whatever the start left), then ``rounds`` more. The
compile's cost is (start + first round) compiled less eager's; the saving per
rollout is the difference of the median later rounds over ``batch``; their ratio
is the break-even run length, in rollouts, that `compile_rollout: auto`'s
threshold (``AUTO_COMPILE_MIN_ROLLOUTS``) is set from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_rollout_replay import run_episode, search_r1_generators

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import child_json, write_report

VARIANTS = {"eager": "vllm-eager", "compiled-cold": "vllm-compiled",
            "compiled-warm": "vllm-compiled"}


def time_rounds(mode: str, args) -> dict:
    """Engine start, first round and ``rounds`` rounds of Search-R1 rollouts, in seconds."""
    from advrag.config import load_config
    from advrag.datasets.loaders import load_qa
    from advrag.recipes.grpo import GrpoConfig
    from advrag.retrieval.retriever import load_retriever

    config = load_config(Path("configs/train.yaml"), GrpoConfig).model_copy(
        update={"model": args.model})
    retriever = load_retriever(args.index)
    records = load_qa(Path("data/world/train.jsonl"))[: args.batch]
    generators, _, start_s = search_r1_generators(mode, config, None)
    rounds = []
    for _ in range(args.rounds + 1):
        started = time.perf_counter()
        run_episode("search_r1", generators, retriever, records, config)
        rounds.append(time.perf_counter() - started)
    return {"start_s": start_s, "first_round_s": rounds[0], "rounds_s": rounds[1:],
            "generated_tokens": generators["policy"].generated_tokens}


def run_variant(name: str, args, cache: Path) -> dict:
    """``name``'s measurement in a subprocess; compiled variants keep vLLM's and inductor's
    caches under ``cache`` (empty for ``compiled-cold``)."""
    env = dict(os.environ)
    if name != "eager":
        env |= {"VLLM_CACHE_ROOT": str(cache / "vllm"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor")}
    cmd = [sys.executable, __file__, "--variant", VARIANTS[name], "--batch", str(args.batch),
           "--rounds", str(args.rounds), "--model", args.model, "--index", str(args.index)]
    return child_json(cmd, env)


def payback(eager: dict, compiled: dict, batch: int) -> dict:
    """The compile's cost (s), the seconds it saves a rollout, and their ratio (rollouts)."""
    cost = (compiled["start_s"] + compiled["first_round_s"]
            - eager["start_s"] - eager["first_round_s"])
    saved = (statistics.median(eager["rounds_s"]) - statistics.median(compiled["rounds_s"])) / batch
    return {"compile_cost_s": cost, "saved_s_per_rollout": saved,
            "break_even_rollouts": cost / saved if saved > 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="rollouts per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the first")
    parser.add_argument("--model", default="smollm2", help="policy (hub id, dir, 'smollm2')")
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--variant", choices=sorted(set(VARIANTS.values())),
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path,
                        default=Path("bench/results/rollout_compile_payback.json"))
    args = parser.parse_args()
    offline_world()
    if args.variant:
        print(json.dumps(time_rounds(args.variant, args)))
        return
    with tempfile.TemporaryDirectory(prefix="advrag-vllm-cache-") as cache:
        variants = {}
        for name in VARIANTS:
            variants[name] = run_variant(name, args, Path(cache))
            print(f"{name}: start {variants[name]['start_s']:.1f} s, first round "
                  f"{variants[name]['first_round_s']:.1f} s, rounds "
                  f"{statistics.median(variants[name]['rounds_s']):.2f} s", flush=True)
    results = {f"payback_{name}": payback(variants["eager"], variants[name], args.batch)
               for name in ("compiled-cold", "compiled-warm")}
    write_report(args.out, {"bench": "bench/rollouts/bench_rollout_compile_payback.py",
                            "model": args.model, "batch": args.batch, "rounds": args.rounds,
                            "variants": variants, **results})
    for name, result in results.items():
        print(f"{name}: compile costs {result['compile_cost_s']:.1f} s, saves "
              f"{result['saved_s_per_rollout'] * 1000:.0f} ms a rollout: break-even "
              f"{result['break_even_rollouts'] or float('inf'):.0f} rollouts")


if __name__ == "__main__":
    main()
