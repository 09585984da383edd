"""One GRPO update on mixed-length rollouts, eight ways: what each change to the update buys.

    python bench/updates/bench_update.py [--batch 16] [--micro-batch 4] [--repeats 3]
                                 [--full] [--fp32] [--ways "+ scored head"] [--attn sdpa eager]

Trajectories are laid out as Search-R1 rollouts of world text (prompt, then
0–2 rounds of 64 policy tokens + ~400 tokens of retrieved passages, then a
64-token answer), so lengths differ as they do in a real step. The same
``LocalTrainer`` (SmolLM2-135M + LoRA r=16, bf16 where the CPU has it, the
train config's micro-batch of 4; ``--full``: full fine-tuning instead of
LoRA; ``--fp32``: fp32 on any CPU, as ``cpu_bf16: false`` runs) updates on them eight ways (``--ways``: a subset), each adding one change
to the previous, interleaved in one process (``--attn``: each way once per
attention implementation of transformers, e.g. ``sdpa`` — its default, the CPU
flash kernel — against ``eager``):

- ``before``: micro-batches of consecutive rows, the old-log-prob pass before
  the step, the LM head over every position (the update as it was);
- ``+ by length``: micro-batches grouped by length (``logprobs.micro_batches``);
- ``+ one pass``: no separate old-log-prob pass — with one epoch the old
  log-probs are the detached current ones;
- ``+ scored head``: the LM head, log-softmax and entropy only at the positions
  that predict a policy token (``logprobs.scored_logits``);
- ``+ fused LoRA``: LoRA layers add their scaled output into the base output in
  one in-place ``addmm_`` (``policy.fused_lora_forward``) instead of peft's
  forward, which the ways above run (with ``--full`` the same as the way above:
  no LoRA layers);
- ``+ AMX attention``: the setting ``amx_attention: true``, attention's forward
  and backward on the block kernels (``attention.causal_attention``: AMX tiles,
  or AVX512-BF16 dot products on a CPU without AMX; on a CPU without AVX512-BF16
  the same as the way above);
- ``+ packed rows``: each micro-batch's rows packed into one row without their
  padding, attention within each row (``logprobs.packed_inputs``; it comes with
  the kernels, so without them the same as the way above): the default eager
  update;
- ``+ compiled layers``: the decoder layers through ``torch.compile``
  (``compile_update: true``; its one-off compile falls in the warm-up round).

Reported per way: median update seconds, real tokens, token positions the
forwards compute (padding included; the old pass counted), and 6·N·T GFLOP/s on
the real tokens against the matmul peak of the update's precision (bf16, or fp32
where the CPU lacks bf16 or with ``--fp32``) measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world, search_r1_rollouts
from reporting import matmul_peak_gflops, write_report


def in_batch_order(attention_mask: torch.Tensor, micro_batch_size: int) -> list[torch.Tensor]:
    """The former micro-batching: consecutive rows, whatever their lengths."""
    return list(torch.arange(attention_mask.shape[0]).split(micro_batch_size))



def computed_positions(trainer, trajectories, strategy, passes: int, packed: bool) -> int:
    """Token positions ``passes`` forwards run over (each micro-batch padded to its longest, or
    only its real tokens where rows are ``packed``)."""
    mask = trainer.encode(trajectories).attention_mask
    if packed:
        return passes * int(mask.sum())
    return passes * sum(len(index) * int(mask[index].sum(dim=1).max())
                        for index in strategy(mask, trainer.config.micro_batch_size))


WAYS = {  # name: (micro-batching, separate old-log-prob pass, head only at scored positions,
    #               fused LoRA forward, AMX attention kernels, packed rows, compiled layers)
    "before": ("batch order", True, False, False, False, False, False),
    "+ by length": ("by length", True, False, False, False, False, False),
    "+ one pass": ("by length", False, False, False, False, False, False),
    "+ scored head": ("by length", False, True, False, False, False, False),
    "+ fused LoRA": ("by length", False, True, True, False, False, False),
    "+ AMX attention": ("by length", False, True, True, True, False, False),
    "+ packed rows": ("by length", False, True, True, True, True, False),
    "+ compiled layers": ("by length", False, True, True, True, True, True),
}


def lora_forwards(model) -> dict:
    """Each LoRA layer of ``model`` → the fused forward it was given (``with_fused_lora_forward``)."""
    from advrag.engines.local.policy import lora_linear_layers

    return {layer: layer.__dict__["forward"] for layer in lora_linear_layers(model)}


def use_fused_lora(fused_forwards: dict, fused: bool) -> None:
    """Run the LoRA layers through their fused forward, or through peft's own."""
    for layer, forward in fused_forwards.items():
        if fused:
            layer.forward = forward
        else:
            layer.__dict__.pop("forward", None)


def head_everywhere(model, batch, rows, cols):
    """The former LM head: logits at every position, the scored ones picked afterwards."""
    return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                 use_cache=False).logits[rows, cols - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="full fine-tuning, not LoRA")
    parser.add_argument("--fp32", action="store_true", help="fp32 even where the CPU has bf16")
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    parser.add_argument("--attn", nargs="+", choices=["sdpa", "eager"], default=["sdpa"])
    parser.add_argument("--out", type=Path, default=Path("bench/results/update.json"))
    args = parser.parse_args()
    offline_world()
    ways = {name + ("" if args.attn == ["sdpa"] else f" [{attn}]"): WAYS[name] + (attn,)
            for name in args.ways for attn in args.attn}

    from advrag.engines.local import logprobs
    from advrag.engines.local import trainer as trainer_module
    from advrag.engines.local.attention import kernel
    from advrag.engines.local.policy import LoraSettings, TrainablePolicy
    from advrag.engines.local.trainer import LocalTrainer, TrainConfig
    from advrag.models.loading import load_policy

    loaded = load_policy("smollm2")
    n_params = sum(p.numel() for p in loaded.model.parameters())
    lora = None if args.full else LoraSettings(r=16, alpha=32)
    policy = TrainablePolicy(loaded.model, lora=lora, keep_reference=False,
                             cpu_bf16=not args.fp32)
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(
        lr=1e-5, kl_coef=0.0, micro_batch_size=args.micro_batch, max_seq_len=2048))
    trajectories = search_r1_rollouts(loaded.tokenizer, args.batch)
    scores = torch.arange(args.batch, dtype=torch.float32) % 3
    groups = [i // 4 for i in range(args.batch)]
    strategies = {"batch order": in_batch_order, "by length": logprobs.micro_batches}
    times: dict[str, list[float]] = {name: [] for name in ways}
    tokens = 0.0
    heads = {True: logprobs.scored_logits, False: head_everywhere}
    packing = {True: logprobs._attention_takes_packed_rows, False: lambda _model: False}
    fused_forwards = lora_forwards(policy.model)
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, (grouping, old_pass, scored_head, fused, amx, packed, compiled,
                   attn) in ways.items():
            loaded.model.set_attn_implementation(attn)
            use_fused_lora(fused_forwards, fused)
            policy.amx_attention = amx
            policy.compile_update = compiled
            logprobs.micro_batches = trainer_module.micro_batches = strategies[grouping]
            logprobs.scored_logits = heads[scored_head]
            logprobs._attention_takes_packed_rows = packing[packed]
            start = time.perf_counter()
            inputs = trainer.prepare(trajectories, scores, groups, entropy_first=old_pass)
            tokens = trainer.learn(inputs).metrics["tokens"]
            if repeat:
                times[name].append(time.perf_counter() - start)
    logprobs.micro_batches = trainer_module.micro_batches = strategies["by length"]
    logprobs.scored_logits = heads[True]
    logprobs._attention_takes_packed_rows = packing[True]
    use_fused_lora(fused_forwards, True)
    kernels_run = policy.uses_bf16() and kernel() is not None  # where the kernel ways pack rows
    precision = "bf16" if policy.cpu_bf16 else "fp32"  # the peak of what the update computes in
    peak = matmul_peak_gflops({"bf16": "bfloat16", "fp32": "float32"}[precision])
    rows = {}
    for name, (grouping, old_pass, _, _, amx, packed, *_) in ways.items():
        seconds = statistics.median(times[name])
        rows[name] = {"update_s": seconds, "real_tokens": tokens,
                      "forward_positions": computed_positions(
                          trainer, trajectories, strategies[grouping], 1 + old_pass,
                          packed and amx and kernels_run),
                      "gflops_6NT": 6 * n_params * tokens / seconds / 1e9,
                      f"share_of_{precision}_peak": 6 * n_params * tokens / seconds / 1e9 / peak}
    names = list(ways)
    write_report(args.out, {
        "bench": "bench/updates/bench_update.py", "batch": args.batch,
        "micro_batch": args.micro_batch,
        "training": "full" if args.full else "LoRA r=16",
        "bf16_cpu": policy.cpu_bf16, f"{precision}_matmul_peak_gflops": peak, "rows": rows,
        "speedup_each": {now: rows[was]["update_s"] / rows[now]["update_s"]
                         for was, now in zip(names, names[1:])},
        "speedup_total": rows[names[0]]["update_s"] / rows[names[-1]]["update_s"],
    })


if __name__ == "__main__":
    main()
