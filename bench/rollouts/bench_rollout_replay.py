"""Agent-loop rollouts against the raw engine on the same prompts and lengths (issue 11, target 1).

    python bench/rollouts/bench_rollout_replay.py [--modes hf-bf16 hf-fp16 vllm-eager vllm-compiled]
                                         [--batch 32] [--repeats 3] [--arr-questions 8]
                                         [--model DIR] [--vllm-block-size N]

Each mode runs in its own subprocess. The policy is the train flow's: SmolLM2-135M
(``--model``: e.g. a warmed-up checkpoint, whose rollouts search as in training)
with LoRA r=16 (adapter weights drawn small and non-zero, so merging them is real
work that leaves the policy's behaviour intact), fp32 weights, bf16 sampling except in
``hf-fp16``:
- ``hf-bf16``: transformers ``generate`` on a LoRA-merged bf16 copy (the default);
- ``hf-fp16``: the policy computes in fp32 (no bf16 autocast: a CPU without bf16
  instructions) and samples with transformers from a LoRA-merged copy whose linear
  weights are packed in fp16 (the ``hf-fp16`` back-end, ``auto``'s choice there);
- ``vllm-eager`` / ``vllm-compiled``: an in-process vLLM-CPU engine in bf16, eager
  or with its torch.compile'd graph (``compile_rollout``), weights pushed from the policy.

Episodes (``configs/train.yaml``'s settings: temperature 1, top-3 dense
retrieval over ``processed/index``):
- ``search_r1``: the Search-R1 loop on ``batch`` train questions, 2 turns, 64
  new tokens per call (+ the forced answer);
- ``arr``: ``configs/arr.yaml``'s dialogues, ``arr-questions`` × group 4, each
  agent sampled from its own copy (a bf16 copy or a vLLM engine) with only its
  adapter merged.

Per repeat (after one warm-up round) the loop runs with every ``generate``
call recorded (``advrag.engines.replay``), then the same engine replays the
recorded calls raw: the same prompts, each completion forced to its recorded
length, no stop strings, retrieval or parsing. Both rates divide the same
completion tokens (the work the loop needed) by their wall time; the loop's
includes retrieval and Python. The loop's time is split into generate /
retrieval / the rest; prompt tokens (prefill work) are counted. Medians over
``repeats``; the engine start is timed once per mode. Results:
``bench/results/rollout_replay.json`` (one row per mode and episode, the newest).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import child_json, write_report

MODES = ["hf-bf16", "hf-fp16", "vllm-eager", "vllm-compiled"]
ADAPTER_STD = 0.005  # LoRA A and B entries: a merged delta ~1 % of SmolLM2's weights


def lora_policy(config, cpu_bf16: bool):
    """SmolLM2 + LoRA as the train flow builds it, adapters drawn non-zero (a trained policy)."""
    from advrag.engines.local.policy import TrainablePolicy
    from advrag.models.loading import load_policy

    loaded = load_policy(config.model, dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=config.lora, cpu_bf16=cpu_bf16)
    torch.manual_seed(0)
    with torch.no_grad():
        for weight in policy.trainable_parameters():
            weight.normal_(0, ADAPTER_STD)
    return policy, loaded


def engine_options(mode: str, block_size: int | None) -> tuple[str, dict]:
    """``mode``'s back-end and its engine settings (``block_size``: vLLM's KV block tokens,
    None = the generator's choice)."""
    if mode.startswith("vllm"):
        return "vllm", {"compile_rollout": mode != "vllm-eager", "block_size": block_size}
    return ("hf-fp16" if mode == "hf-fp16" else "hf"), {}


def computes_in_bf16(mode: str) -> bool:
    """Whether ``mode``'s policy runs under CPU bf16 autocast (all but ``hf-fp16``)."""
    return mode != "hf-fp16"


def search_r1_generators(mode: str, config, block_size: int | None):
    """The train flow's generator for ``mode``; {name: generator}, tokenizer, engine start s."""
    from advrag.engines.generators import make_generator

    policy, loaded = lora_policy(config, computes_in_bf16(mode))
    backend, engine = engine_options(mode, block_size)
    started = time.perf_counter()
    generator = make_generator(backend, policy.model, loaded.tokenizer, loaded.source,
                               temperature=config.temperature, batch_size=64,
                               autocast=policy.autocast, **engine)
    return {"policy": generator}, loaded.tokenizer, time.perf_counter() - started


def arr_generators(mode: str, config, block_size: int | None):
    """One sampler per ARR agent (``dual.agent_generators`` on ``mode``'s back-end), adapters
    drawn non-zero."""
    from advrag.engines.local import dual
    from advrag.models.loading import load_policy, resolve_model_dir

    loaded = load_policy(config.model, dtype="float32")
    policies = dual.shared_lora_policies(loaded.model, config.lora,
                                         cpu_bf16=computes_in_bf16(mode))
    torch.manual_seed(0)
    with torch.no_grad():
        for policy in policies.values():
            for weight in policy.trainable_parameters():
                weight.normal_(0, ADAPTER_STD)
    tokenizers = dict.fromkeys(policies, loaded.tokenizer)
    started = time.perf_counter()
    backend, engine = engine_options(mode, block_size)
    generators = dual.agent_generators(
        policies, tokenizers, temperature=config.temperature, backend=backend,
        model_dirs=dict.fromkeys(policies, resolve_model_dir(config.model)), **engine)
    for name, generator in generators.items():
        generator.push_weights(policies[name].model)
    return generators, loaded.tokenizer, time.perf_counter() - started


def run_episode(episode: str, generators: dict, retriever, records, config) -> None:
    """One batched rollout of ``episode`` through ``generators`` (recorders)."""
    if episode == "search_r1":
        from advrag.agents.search_loop import run_search_agent

        run_search_agent([r.question for r in records], generators["policy"], retriever,
                         max_turns=config.max_turns, topk=3,
                         max_new_tokens=config.max_new_tokens)
    else:
        from advrag.recipes.arr.step import rollout

        rollout(records, generators, retriever, config)


def measure(episode: str, generators: dict, tokenizer, retriever, records, config) -> dict:
    """One loop run with recorded calls, then their raw replay on the same engines."""
    from advrag.engines.replay import RecordingGenerator, replay, reset_prefix_cache
    from advrag.recipes.arr.step import TimedRetriever

    for generator in generators.values():
        reset_prefix_cache(generator)
    recorders = {name: RecordingGenerator(g) for name, g in generators.items()}
    timed = TimedRetriever(retriever)
    started = time.perf_counter()
    run_episode(episode, recorders, timed, records, config)
    loop_s = time.perf_counter() - started
    replays = [replay(generators[name], r.calls) for name, r in recorders.items()]
    raw_s, produced = sum(s for s, _ in replays), sum(n for _, n in replays)
    tokens = sum(r.tokens for r in recorders.values())
    generate_s = sum(r.seconds for r in recorders.values())
    prompts = [p for r in recorders.values() for c in r.calls for p in c.prompts]
    return {"tokens": tokens, "calls": sum(len(r.calls) for r in recorders.values()),
            "prompt_tokens": sum(map(len, tokenizer(prompts, add_special_tokens=False)["input_ids"])),
            "loop_s": loop_s, "generate_s": generate_s, "retrieval_s": timed.seconds,
            "other_s": loop_s - generate_s - timed.seconds, "raw_s": raw_s,
            "raw_produced_tokens": produced, "loop_tokens_per_s": tokens / loop_s,
            "raw_tokens_per_s": tokens / raw_s, "ratio": raw_s / loop_s}


def run_mode(mode: str, args) -> list[dict]:
    """Every episode of ``mode``, ``repeats`` measured runs after a warm-up run each."""
    from advrag.config import load_config
    from advrag.datasets.loaders import load_qa
    from advrag.recipes.arr import ArrConfig
    from advrag.recipes.grpo import GrpoConfig
    from advrag.retrieval.retriever import load_retriever

    retriever = load_retriever(args.index)
    train = load_qa(Path("data/world/train.jsonl"))
    model = {"model": args.model}
    episodes = {"search_r1": (load_config(Path("configs/train.yaml"), GrpoConfig)
                              .model_copy(update=model), train[: args.batch]),
                "arr": (load_config(Path("configs/arr.yaml"), ArrConfig)
                        .model_copy(update=model), train[: args.arr_questions])}
    rows = []
    for episode, (config, records) in episodes.items():
        build = arr_generators if episode == "arr" else search_r1_generators
        generators, tokenizer, start_s = build(mode, config, args.vllm_block_size)
        runs = [measure(episode, generators, tokenizer, retriever, records, config)
                for _ in range(args.repeats + 1)][1:]
        rows.append({"mode": mode, "episode": episode, "engine_start_s": start_s,
                     "median_ratio": statistics.median(r["ratio"] for r in runs),
                     "median_loop_tokens_per_s": statistics.median(
                         r["loop_tokens_per_s"] for r in runs),
                     "median_raw_tokens_per_s": statistics.median(
                         r["raw_tokens_per_s"] for r in runs), "runs": runs})
        del generators
    return rows


def child_command(mode: str, args) -> list[str]:
    """This script, for one mode, with the same settings."""
    return [sys.executable, __file__, "--mode", mode, "--batch", str(args.batch),
            "--repeats", str(args.repeats), "--arr-questions", str(args.arr_questions),
            "--index", str(args.index), "--model", args.model,
            *(["--vllm-block-size", str(args.vllm_block_size)] if args.vllm_block_size else [])]


def print_table(rows: list[dict]) -> None:
    print("| mode | episode | loop tokens/s | raw tokens/s | loop / raw | generate / retrieval"
          " / other s | engine start s |\n|---|---|---|---|---|---|---|")
    for r in rows:
        split = [statistics.median(run[k] for run in r["runs"])
                 for k in ("generate_s", "retrieval_s", "other_s")]
        print(f"| {r['mode']} | {r['episode']} | {r['median_loop_tokens_per_s']:.0f} | "
              f"{r['median_raw_tokens_per_s']:.0f} | {r['median_ratio']:.2f} | "
              f"{split[0]:.1f} / {split[1]:.2f} / {split[2]:.2f} | {r['engine_start_s']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--arr-questions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2", help="policy (hub id, dir, 'smollm2')")
    parser.add_argument("--vllm-block-size", type=int,
                        help="vLLM's KV block tokens (default: the generator's choice)")
    parser.add_argument("--mode", choices=MODES, help="internal: run one mode")
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/rollout_replay.json"))
    args = parser.parse_args()
    offline_world()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args)))
        return
    rows = []
    for mode in args.modes:
        rows += child_json(child_command(mode, args))
        print(f"{mode}: done", flush=True)
    write_report(args.out, {"bench": "bench/rollouts/bench_rollout_replay.py", "model": args.model,
                            "batch": args.batch, "vllm_block_size": args.vllm_block_size,
                            "arr_questions": args.arr_questions, "repeats": args.repeats,
                            "rows": rows})
    print_table(rows)


if __name__ == "__main__":
    main()
