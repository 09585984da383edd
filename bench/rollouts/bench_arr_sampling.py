"""ARR rollouts of both agents: bf16 copies (one per agent) vs sampling through bf16 autocast.

    python bench/rollouts/bench_arr_sampling.py [--questions 4] [--repeats 3]

The shared-base LoRA pair of ``configs/arr.yaml`` (SmolLM2-135M, fp32 weights,
``cpu_bf16``) runs the same ARR dialogues (``advrag.recipes.arr.step.rollout``: group ×
questions, the config's turns, top-k and token cap) with two sets of samplers,
interleaved in one process:

- ``autocast``: each agent's adapter activated on the shared fp32 model,
  every ``generate`` under CPU bf16 autocast (the previous default);
- ``bf16 copies``: ``dual.agent_generators``' default under bf16 — one bf16
  copy per agent with only its adapter merged, refreshed by ``push_weights``.

The adapters are given random non-zero weights first, so the two agents differ
as they do during training. Sampling is random (temperature of the config), so
completion lengths differ between runs: the report gives generated tokens and
tokens/s of each run, medians over ``--repeats``, and the time of one push.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report


class AdapterGenerator:
    """The previous default sampler: one agent's adapter activated on the shared live model
    before each ``generate`` call of ``inner``."""

    def __init__(self, inner, policy):
        self.inner, self.policy = inner, policy

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self.inner.chat_prompt(user, system)

    def generate(self, prompts, *, max_new_tokens: int, stop=()) -> list[str]:
        self.policy.activate()
        return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)


def autocast_generators(policies, tokenizers, temperature: float) -> dict:
    """Each agent sampled from the live fp32 model, its adapter active, under bf16 autocast."""
    from advrag.engines.local.generation import HFGenerator

    return {name: AdapterGenerator(HFGenerator(policy.model, tokenizers[name],
                                               temperature=temperature, batch_size=64,
                                               autocast=policy.autocast), policy)
            for name, policy in policies.items()}


def generated_tokens(generators: dict) -> int:
    """Tokens both agents' generators have produced so far."""
    return sum(getattr(g, "inner", g).generated_tokens for g in generators.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/arr.yaml"))
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/arr_sampling.json"))
    args = parser.parse_args()
    offline_world()

    from advrag.config import load_config
    from advrag.datasets.loaders import load_qa
    from advrag.engines.local import dual
    from advrag.models.loading import load_policy
    from advrag.recipes.arr import ArrConfig
    from advrag.recipes.arr.step import rollout
    from advrag.retrieval.retriever import load_retriever

    config = load_config(args.config, ArrConfig)
    loaded = load_policy(config.model, dtype="float32")
    policies = dual.shared_lora_policies(loaded.model, config.lora, cpu_bf16=config.cpu_bf16)
    torch.manual_seed(0)
    with torch.no_grad():
        for policy in policies.values():
            for weight in policy.trainable_parameters():
                weight.normal_(0, 0.02)
    tokenizers = dict.fromkeys(policies, loaded.tokenizer)
    ways = {"autocast": autocast_generators(policies, tokenizers, config.temperature),
            "bf16 copies": dual.agent_generators(policies, tokenizers,
                                                 temperature=config.temperature)}
    started = time.perf_counter()
    for name, generator in ways["bf16 copies"].items():
        generator.push_weights(policies[name].model)
    push_s = (time.perf_counter() - started) / len(policies)
    retriever = load_retriever(config.index_dir)
    records = load_qa(config.world_dir / "train.jsonl")[: args.questions]
    runs: dict[str, list[dict]] = {name: [] for name in ways}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, generators in ways.items():
            before, start = generated_tokens(generators), time.perf_counter()
            rollout(records, generators, retriever, config)
            seconds, tokens = time.perf_counter() - start, generated_tokens(generators) - before
            if repeat:
                runs[name].append({"seconds": seconds, "tokens": tokens,
                                   "tokens_per_s": tokens / seconds})
            print(f"{name}: {tokens} tokens in {seconds:.1f} s", flush=True)
    rows = {name: {"median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                   "median_seconds": statistics.median(r["seconds"] for r in rs), "runs": rs}
            for name, rs in runs.items()}
    write_report(args.out, {
        "bench": "bench/rollouts/bench_arr_sampling.py", "model": config.model,
        "bf16_cpu": next(iter(policies.values())).cpu_bf16,
        "dialogues": args.questions * config.group_size, "max_turns": config.max_turns,
        "max_new_tokens": config.max_new_tokens, "rows": rows, "push_s_per_agent": push_s,
        "speedup_tokens_per_s": rows["bf16 copies"]["median_tokens_per_s"]
        / rows["autocast"]["median_tokens_per_s"],
    })


if __name__ == "__main__":
    main()
