"""Our GRPO step vs TRL's ``GRPOTrainer``, side by side in one run (single-turn, no retrieval).

    python bench/steps/bench_trl.py [--prompts 4] [--group 4] [--max-new-tokens 32] [--steps 3]
                              [--warmup 1] [--modes full lora] [--cpu-bf16 | --bf16-only]
                              [--rollout-backend hf|hf-fp16|vllm] [--device cpu|cuda|auto]
                              [--model smollm2|DIR] [--random-weights] [--compile-update]
                              [--vllm-block-size N] [--vllm-compiled]

Each variant (full fine-tuning / LoRA r=16, fp32 / CPU bf16 autocast) runs in
its own subprocess, which holds both trainers on SmolLM2-135M-Instruct (the
same cached transformers directory ``models.loading`` converts; ``--model`` for
another, ``--random-weights`` for fresh weights at its shapes, where only the
config and tokenizer can travel) on ``--device`` and alternates
them: TRL takes one optimizer step, then our step runs from TRL's
``on_step_end`` callback on the same questions, and so on. The first
``--warmup`` steps of each side are dropped; medians of the rest are reported.

What one step is, on each side (same prompts, group size, completion cap, lr,
clip range, KL weight, loss aggregation, micro-batch, no gradient checkpointing):
- ours: the train flow's generator (``make_generator("hf")``: the trainer's own
  model, or under CPU bf16 a bf16 copy with LoRA merged, pushed after every
  update, the push inside the step's time; ``--rollout-backend hf-fp16``: a
  copy whose linear layers compute with fp16 weights through fbgemm, fp32
  activations, packed again after every update inside the step's time;
  ``--rollout-backend vllm``: an
  in-process vLLM-CPU engine, eager (``--vllm-compiled``: its torch.compile'd
  graph, compiled at the engine's start, before the timed steps), in the
  policy's compute dtype, weights
  pushed after every update inside the step's time) samples ``prompts × group``
  completions (one batched ``generate``), each becomes a ``Trajectory``
  (prompt segment + policy segment), rewards are scored, then
  ``LocalTrainer.update``: re-tokenise, reference log-probs (only when KL >
  0), GRPO advantages, PPO-clip loss with gradient accumulation over
  length-grouped micro-batches (one epoch: no separate old-log-prob pass, the
  entropy read from the same forward; the LM head only at completion
  positions), clip, fused AdamW. ``--compile-update``: our update's decoder
  layers run through ``torch.compile`` (``compile_update: true``; the compile
  falls in the untimed warm-up steps); TRL's stay eager.
- TRL: ``GRPOTrainer`` with ``num_iterations=1`` on transformers ``generate``:
  one batched generation, reward, reference log-probs (only when beta > 0),
  then the loss on micro-batches. With one iteration it skips the old log-prob
  pass (the ratio's denominator is the detached current log-prob) and computes
  logits only at completion positions.
A TRL step's time is the wall time between two returns to our callback, so
it includes the trainer loop's own per-step work (data, logging).

The reward is token F1 between the whole completion and the gold answers of
the offline world's train split. Prompts are the bare questions under the chat
template; questions longer than ``--max-prompt-len`` tokens are skipped, so
neither side truncates a prompt (TRL 1.16 has no prompt-length cap).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advrag.common.allocator import allocator_in_use

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import cpu_description, matmul_peak_gflops, openmp_wait_policy

ROOT = Path(__file__).resolve().parents[2]
LORA_R, LORA_ALPHA = 16, 32


def bench_records(tokenizer, args) -> list:
    """The first ``(warmup + steps) × prompts`` train questions whose prompt fits the cap."""
    from advrag.datasets.loaders import load_qa

    needed = (args.warmup + args.steps) * args.prompts
    chosen = []
    for record in load_qa(ROOT / "data/world/train.jsonl"):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": record.question}], add_generation_prompt=True
        )
        if len(ids["input_ids"] if isinstance(ids, dict) else ids) <= args.max_prompt_len:
            chosen.append(record)
        if len(chosen) == needed:
            return chosen
    raise ValueError(
        f"only {len(chosen)} train questions fit --max-prompt-len {args.max_prompt_len}; "
        f"need {needed}: raise the cap or lower --steps/--prompts"
    )


class OurSide:
    """Our single-turn GRPO step: sample → trajectories → score → ``LocalTrainer.update``."""

    def __init__(self, source: str, mode: str, bf16: bool, args):
        from advrag.engines.generators import make_generator
        from advrag.engines.local.policy import LoraSettings, TrainablePolicy
        from advrag.engines.local.trainer import LocalTrainer, TrainConfig
        from advrag.models.loading import load_policy

        loaded = load_policy(source, dtype="float32", device=args.device)
        self.source, self.tokenizer = loaded.source, loaded.tokenizer
        lora = LoraSettings(r=LORA_R, alpha=LORA_ALPHA) if mode == "lora" else None
        policy = TrainablePolicy(
            loaded.model, lora=lora, keep_reference=args.kl > 0, bf16=bf16, cpu_bf16=bf16,
            compile_update=args.compile_update,
        )
        config = TrainConfig(
            lr=args.lr, weight_decay=0.0, grad_clip=1.0, micro_batch_size=args.micro_batch,
            max_seq_len=args.max_prompt_len + 2 * args.max_new_tokens, ppo_epochs=1,
            clip_low=0.2, clip_high=0.2, dual_clip=None, kl_coef=args.kl, kl_kind="k3",
            loss_agg="token-mean", advantage="grpo", seed=args.seed,
        )
        self.trainer, self.group = LocalTrainer(policy, loaded.tokenizer, config), args.group
        engine = ({"compile_rollout": args.vllm_compiled, "block_size": args.vllm_block_size}
                  if args.rollout_backend == "vllm" else {})
        self.generator = make_generator(  # the train flow's: a bf16 copy under bf16
            args.rollout_backend, policy.model, loaded.tokenizer, loaded.source,
            temperature=1.0, top_p=1.0, batch_size=args.prompts * args.group,
            max_prompt_tokens=args.max_prompt_len, autocast=policy.autocast, **engine,
        )
        self.max_new_tokens = args.max_new_tokens
        self.bf16_active = policy.uses_bf16()
        self.device = str(policy.device)

    def step(self, records) -> dict[str, float]:
        """One timed GRPO step on ``records`` (each sampled ``group`` times)."""
        from advrag.agents.types import Trajectory
        from advrag.core.metrics import f1_score
        from advrag.engines.local.trainer import push_updated_weights
        from advrag.recipes.rollout import score

        started = time.perf_counter()
        self.trainer.policy.model.eval()
        repeated = [r for r in records for _ in range(self.group)]
        prompts = [self.generator.chat_prompt(r.question) for r in repeated]
        completions = self.generator.generate(prompts, max_new_tokens=self.max_new_tokens)
        trajectories = []
        for prompt, completion in zip(prompts, completions, strict=True):
            trajectory = Trajectory()
            trajectory.add(prompt, "prompt")
            trajectory.add(completion, "policy")
            trajectories.append(trajectory)
        rollout_s = time.perf_counter() - started
        scores = score(
            trajectories, repeated, lambda t, r: f1_score(t.policy_text(), r.golden_answers)
        )
        metrics = self.trainer.update(trajectories, scores, [r.id for r in repeated]).metrics
        push_updated_weights(self.generator, self.trainer)
        step_s = time.perf_counter() - started
        return {
            "step_s": step_s,
            "rollout_s": rollout_s,
            "update_s": step_s - rollout_s,
            "tokens": metrics["tokens"],
            "completion_mean_len": metrics["response_length"],
            "reward_mean": float(scores.mean()),
        }


def f1_reward(completions, golden_answers, **kwargs) -> list[float]:
    """TRL reward function: token F1 of each completion's text against its gold answers."""
    from advrag.core.metrics import f1_score

    return [f1_score(c[0]["content"], gold) for c, gold in zip(completions, golden_answers)]


def trl_trainer(source: str, records, mode: str, bf16: bool, args, callback, out_dir: str):
    """A ``GRPOTrainer`` with the same settings as ``OurSide`` and timing of its rollouts."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        """Records the time of each generation + scoring phase (per optimizer step here)."""

        rollout_times: list[float] = []

        def _generate_and_score_completions(self, inputs):
            started = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.rollout_times.append(time.perf_counter() - started)

    completions = args.prompts * args.group
    config = GRPOConfig(
        output_dir=out_dir, use_cpu=args.device == "cpu", bf16=bf16, fp16=False, seed=args.seed,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=completions // args.micro_batch,
        num_generations=args.group, max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, learning_rate=args.lr, lr_scheduler_type="constant",
        weight_decay=0.0, max_grad_norm=1.0, beta=args.kl, num_iterations=1, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", gradient_checkpointing=False,
        max_steps=args.warmup + args.steps, shuffle_dataset=False, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": r.question}], "golden_answers": r.golden_answers}
            for r in records
        ]
    )
    peft_config = None
    if mode == "lora":
        peft_config = LoraConfig(
            r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
    return TimedGRPOTrainer(
        model=source, reward_funcs=f1_reward, args=config, train_dataset=dataset,
        peft_config=peft_config, callbacks=[callback],
    )


def side_by_side_callback(ours: OurSide, records, args):
    """A TRL callback that times TRL's steps and runs our step after each of them."""
    from transformers import TrainerCallback

    class SideBySide(TrainerCallback):
        def __init__(self):
            self.trl_rows: list[dict[str, float]] = []
            self.our_rows: list[dict[str, float]] = []
            self.mark = 0.0
            self.tokens_seen = 0

        def on_train_begin(self, args_, state, control, **kwargs):
            self.mark = time.perf_counter()

        def on_step_end(self, args_, state, control, **kwargs):
            now = time.perf_counter()
            tokens = state.num_input_tokens_seen - self.tokens_seen
            self.tokens_seen = state.num_input_tokens_seen
            self.trl_rows.append({"step_s": now - self.mark, "tokens": float(tokens)})
            k = state.global_step - 1
            self.our_rows.append(ours.step(records[k * args.prompts : (k + 1) * args.prompts]))
            self.mark = time.perf_counter()

    return SideBySide()


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Median of every field over the timed rows."""
    return {name: statistics.median(r[name] for r in rows) for name in rows[0]}


def random_weights_copy(model: str, out_dir: Path, seed: int) -> str:
    """``model``'s architecture and tokenizer with freshly initialised weights, saved in
    ``out_dir``: needs only its config and tokenizer files, not its weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from advrag.models.loading import resolve_model_dir

    source = resolve_model_dir(model)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(source).save_pretrained(out_dir)
    return str(out_dir)


def update_floor_gflop(model, mode: str, tokens: float, completion_tokens: float) -> float:
    """The fewest matmul GFLOP one update of ``tokens`` (``completion_tokens`` of them scored)
    can do: c·N·T through the decoder layers' weights plus c·V·d for the LM head at the scored
    positions, c = 6 in full fine-tuning and 4 in LoRA (no gradients for frozen weights).
    Attention's own FLOPs and the adapters' are left out, so it is a lower bound."""
    body = sum(p.numel() for name, p in model.named_parameters()
               if ".layers." in name and "lora_" not in name)
    head = model.get_input_embeddings().weight.numel()
    c = 6 if mode == "full" else 4
    return c * (body * tokens + head * completion_tokens) / 1e9


def peak_bound(row: dict, floor_gflop: float, peak: float) -> dict[str, float]:
    """How close each side's update is to the matmul peak, and the best ratio our step could
    reach with its rollout as measured and an update at the peak."""
    floor = {side: floor_gflop * row[side]["tokens"] / row["ours"]["tokens"] for side in row}
    best_ours_step = row["ours"]["rollout_s"] + floor["ours"] / peak
    return {
        "update_share_of_peak_ours": floor["ours"] / peak / row["ours"]["update_s"],
        "update_share_of_peak_trl": floor["trl"] / peak / row["trl"]["update_s"],
        "best_ratio_tokens_per_s_with_our_update_at_peak":
            row["ours"]["tokens"] / best_ours_step / row["trl"]["tokens_per_s"],
    }


def run_variant(mode: str, bf16: bool, args) -> dict:
    """Build both trainers in this process, alternate their steps, return both sides' medians."""
    import torch

    peak = None if args.device.startswith("cuda") else matmul_peak_gflops(
        "bfloat16" if bf16 else "float32")
    with tempfile.TemporaryDirectory() as out_dir:
        source = args.model
        if args.random_weights:
            source = random_weights_copy(args.model, Path(out_dir) / "random", args.seed)
        ours = OurSide(source, mode, bf16, args)
        records = bench_records(ours.tokenizer, args)
        callback = side_by_side_callback(ours, records, args)
        trainer = trl_trainer(ours.source, records, mode, bf16, args, callback, out_dir)
        trl_params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        trainer.train()
    logs = {entry["step"]: entry for entry in trainer.state.log_history if "reward" in entry}
    for step, row in enumerate(callback.trl_rows, start=1):
        log = logs.get(step, {})
        row["rollout_s"] = trainer.rollout_times[step - 1]
        row["update_s"] = row["step_s"] - row["rollout_s"]
        row["completion_mean_len"] = log.get("completions/mean_length", float("nan"))
        row["reward_mean"] = log.get("reward", float("nan"))
    timed = slice(args.warmup, None)
    sides = {}
    for name, rows in (("ours", callback.our_rows), ("trl", callback.trl_rows)):
        med = medians(rows[timed])
        sides[name] = med | {
            "tokens_per_s": med["tokens"] / med["step_s"],
            "steps_s": [r["step_s"] for r in rows[timed]],
        }
    ours_params = sum(p.numel() for p in ours.trainer.policy.trainable_parameters())
    completions = args.prompts * args.group
    floor = update_floor_gflop(ours.trainer.policy.model, mode, sides["ours"]["tokens"],
                               sides["ours"]["completion_mean_len"] * completions)
    bound = peak_bound(sides, floor, peak) if peak else {}
    return {
        "mode": mode + ("+bf16" if bf16 else ""),
        "device": ours.device,
        "bf16_active": ours.bf16_active,
        "trainable_params": {"ours": ours_params, "trl": trl_params},
        "ours": sides["ours"],
        "trl": sides["trl"],
        "ratio_step_s_ours_over_trl": sides["ours"]["step_s"] / sides["trl"]["step_s"],
        "ratio_tokens_per_s_ours_over_trl": sides["ours"]["tokens_per_s"]
        / sides["trl"]["tokens_per_s"],
        "update_floor_gflop_ours": floor,
        "matmul_peak_gflops": peak,
        **bound,
        "peak_rss_gib_both_sides": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "peak_gpu_gib_both_sides": (torch.cuda.max_memory_allocated() / 2**30
                                    if ours.device.startswith("cuda") else None),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min_at_end": os.getloadavg()[0],
    }


WORK = {
    "ours": (
        "make_generator(rollout_backend).generate (one batch, temperature 1, top-p 1; hf under "
        "bf16: a bf16 copy, LoRA merged; hf-fp16: a copy with fp16 weights packed for fbgemm, fp32 "
        "activations; vllm: a vLLM-CPU engine, eager unless --vllm-compiled, with KV blocks of 32 "
        "tokens unless "
        "--vllm-block-size says otherwise, so a group's copies of a prompt share its prefill; "
        "each pushed after each "
        "update inside the step) -> Trajectory(prompt, policy) "
        "-> F1 reward -> LocalTrainer.update: re-tokenise, reference forward only if kl_coef > "
        "0, GRPO z-score advantages, PPO clip 0.2/0.2 (no dual clip), token-mean loss, grad "
        "accumulation over length-grouped micro-batches, clip 1.0, fused AdamW; no old log-prob "
        "pass (one epoch: the ratio's denominator is the detached current log-prob, the "
        "entropy read from the same forward) and logits only at completion positions."
    ),
    "trl": (
        "GRPOTrainer, num_iterations=1, transformers generate (one batch, temperature 1, "
        "top-p 1), F1 reward, reference forward only if beta > 0, scale_rewards='group', "
        "loss_type='dapo' (token mean over the accumulated batch), epsilon 0.2, grad "
        "accumulation over micro-batches, clip 1.0, AdamW (transformers default "
        "adamw_torch_fused); no old log-prob pass (skipped when num_iterations=1) and logits "
        "only at completion positions."
    ),
    "differences": (
        "With --rollout-backend vllm ours samples on vLLM-CPU and TRL on transformers generate "
        "(TRL's own vLLM modes are not run here); with hf-fp16 ours samples weights rounded to "
        "fp16 (the update's log-probs are fp32), TRL the fp32 weights. "
        "Sampling is random on both sides, so completion lengths differ: compare tokens/s as "
        "well as seconds. Ours trains on the decoded completion re-tokenised without the EOS "
        "token; TRL trains on the sampled ids including EOS. With bf16 both sides keep fp32 "
        "weights and run log-prob and loss passes under CPU bf16 autocast (ours through "
        "TrainablePolicy.autocast, TRL through accelerate); TRL also generates under autocast, "
        "ours from a bf16 copy, as the train flow does."
    ),
}

COLUMNS = {
    "step_s": "median wall seconds of one whole step (rollout + scoring + update)",
    "rollout_s": (
        "ours: generate; TRL: _generate_and_score_completions (generate, reward, advantages, "
        "reference log-probs when beta > 0)"
    ),
    "update_s": "step_s - rollout_s (the rest of the step: log-prob passes, loss, optimizer)",
    "tokens": "prompt + completion tokens of all sequences in the step (no padding)",
    "tokens_per_s": "tokens / step_s (medians)",
    "completion_mean_len": "mean completion tokens per sequence",
    "ratio_step_s_ours_over_trl": "below 1: our step is faster",
    "update_floor_gflop_ours": (
        "fewest matmul GFLOP of our update: c·N·T through the decoder layers + c·V·d at the "
        "completion positions, c = 6 full / 4 LoRA; attention left out (a lower bound)"
    ),
    "matmul_peak_gflops": "2048² matmul in the step's dtype, measured in the variant's process (CPU)",
    "update_share_of_peak_ours": "floor / peak / update_s (TRL's: the floor scaled to its tokens)",
    "best_ratio_tokens_per_s_with_our_update_at_peak": (
        "our tokens / (our rollout_s + floor / peak) over TRL's tokens/s: the most our step could "
        "gain with its rollout as measured"
    ),
}


def child_command(mode: str, bf16: bool, args, out: Path) -> list[str]:
    """The subprocess command that runs one variant and writes its row to ``out``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--variant", mode, "--child-out", str(out)]
    for flag in ("prompts", "group", "max_new_tokens", "max_prompt_len", "micro_batch",
                 "steps", "warmup", "lr", "kl", "seed", "rollout_backend", "model", "device"):
        cmd += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.vllm_block_size:
        cmd += ["--vllm-block-size", str(args.vllm_block_size)]
    switches = [("--variant-bf16", bf16), ("--random-weights", args.random_weights),
                ("--compile-update", args.compile_update), ("--vllm-compiled", args.vllm_compiled)]
    return cmd + [switch for switch, on in switches if on]


def versions() -> dict[str, str]:
    """Library versions that decide the numbers."""
    import peft
    import torch
    import transformers
    import trl

    return {
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "trl": trl.__version__,
        "peft": peft.__version__,
    }


def print_table(rows: list[dict]) -> None:
    """Markdown table of the medians."""
    print("| variant | side | step s | rollout s | update s | tokens/step | tokens/s | "
          "completion len | ours/TRL step s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for side in ("ours", "trl"):
            s = row[side]
            ratio = f"{row['ratio_step_s_ours_over_trl']:.2f}" if side == "ours" else ""
            print(f"| {row['mode']} | {side} | {s['step_s']:.2f} | {s['rollout_s']:.2f} | "
                  f"{s['update_s']:.2f} | {s['tokens']:.0f} | {s['tokens_per_s']:.0f} | "
                  f"{s['completion_mean_len']:.1f} | {ratio} |")
    for row in rows:
        if row.get("matmul_peak_gflops"):
            print(f"{row['mode']}: update at {row['update_share_of_peak_ours']:.0%} (ours) and "
                  f"{row['update_share_of_peak_trl']:.0%} (TRL) of the "
                  f"{row['matmul_peak_gflops']:.0f} GFLOP/s matmul peak; with our update at the "
                  f"peak our step would reach at most "
                  f"{row['best_ratio_tokens_per_s_with_our_update_at_peak']:.2f}x TRL's tokens/s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="questions per step")
    parser.add_argument("--group", type=int, default=4, help="completions per question (>= 2)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="completion cap")
    parser.add_argument("--max-prompt-len", type=int, default=128, help="prompt tokens cap")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per forward")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first steps per side")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--kl", type=float, default=0.0, help="our kl_coef = TRL's beta (k3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", nargs="+", choices=["full", "lora"], default=["full", "lora"])
    parser.add_argument("--cpu-bf16", action="store_true",
                        help="also run bf16 autocast rows (on a GPU too)")
    parser.add_argument("--bf16-only", action="store_true",
                        help="only the bf16 rows (the train flow's default on a GPU or a bf16 CPU)")
    parser.add_argument("--rollout-backend", choices=["hf", "hf-fp16", "vllm"], default="hf",
                        help="our side's generator (TRL always uses transformers generate)")
    parser.add_argument("--model", default="smollm2",
                        help="policy spec for both sides (models.loading: 'smollm2', a directory)")
    parser.add_argument("--random-weights", action="store_true",
                        help="freshly initialised weights at --model's shapes (config and "
                        "tokenizer only): same work per step, where the weights cannot travel")
    parser.add_argument("--compile-update", action="store_true",
                        help="our update's decoder layers through torch.compile (TRL's eager)")
    parser.add_argument("--vllm-block-size", type=int,
                        help="our vLLM engine's KV block tokens (default: the generator's choice)")
    parser.add_argument("--vllm-compiled", action="store_true",
                        help="our vLLM engine runs its torch.compile'd graph (default: eager)")
    parser.add_argument("--device", default="cpu",
                        help="'cpu', 'cuda' or 'auto' (advrag.common.device.pick_device)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/trl.json")
    parser.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)
    parser.add_argument("--variant-bf16", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    completions = args.prompts * args.group
    if args.group < 2:
        parser.error("--group must be >= 2 (TRL's GRPO needs two completions per prompt)")
    if completions % args.micro_batch:
        parser.error(f"--micro-batch {args.micro_batch} must divide prompts × group = {completions}")
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    return args


def main() -> None:
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                        ("DO_NOT_TRACK", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)
    args = parse_args()
    offline_world()
    if args.variant:
        sys.path.insert(0, str(ROOT))
        row = run_variant(args.variant, args.variant_bf16, args)
        args.child_out.write_text(json.dumps(row))
        return
    from advrag.common.device import pick_device
    from advrag.common.fileio import atomic_write_text

    args.device = pick_device(args.device)
    load_at_start = os.getloadavg()[0]
    precisions = [True] if args.bf16_only else [False, True] if args.cpu_bf16 else [False]
    variants = [(m, b) for b in precisions for m in args.modes]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, bf16 in variants:
            out = Path(tmp) / f"{mode}-{bf16}.json"
            subprocess.run(child_command(mode, bf16, args, out), check=True, cwd=ROOT)
            rows.append(json.loads(out.read_text()))
    settings = {k: v for k, v in vars(args).items() if not k.startswith(("variant", "child"))}
    result = {
        "command": " ".join(["python", "bench/steps/bench_trl.py", *sys.argv[1:]]),
        "model": (f"{args.model} (models.loading), fp32 weights"
                  + (", freshly initialised (--random-weights)" if args.random_weights else "")),
        "settings": settings | {"out": str(args.out)},
        "what_each_side_computes": WORK,
        "timing": (
            f"one process per variant; TRL step k then our step k on the same {args.prompts} "
            f"questions; medians of steps {args.warmup + 1}..{args.warmup + args.steps}"
        ),
        "columns": COLUMNS,
        "cpu": cpu_description(),
        "load_average_1min_at_start": load_at_start,
        "omp_wait_policy": openmp_wait_policy(),
        "allocator": allocator_in_use(),
        "versions": versions(),
        "rows": rows,
    }
    atomic_write_text(args.out, [json.dumps(result, indent=2) + "\n"])
    print_table(rows)


if __name__ == "__main__":
    main()
