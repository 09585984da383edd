"""A small joint ARR run on a tiny model that checkpoints, for the dual-policy tests (also a script).

A tiny random model never writes the tag protocol, so every reward would be
equal and nothing would be learned. ``TaggingGenerator`` wraps each agent's
real sampling generator and puts its sampled text inside protocol tags,
choosing the answer (gold, partly right, wrong) from the sampled text: the
rewards, the critique actions and the process advantage then all depend on
what the policy sampled, so a resumed run only matches an uninterrupted one
if weights, optimizers, schedules *and* RNG states all came back.

Script use:
  python dual_resume_worker.py MODEL_DIR WORLD_DIR INDEX_DIR CKPT_ROOT OUT_DIR --until 3 --hang
      train from scratch, checkpoint both agents after every update, print
      "checkpointed <step>", and after ``--until`` updates sleep until killed;
  python dual_resume_worker.py MODEL_DIR WORLD_DIR INDEX_DIR CKPT_ROOT OUT_DIR --until 3 --resume
      resume from the newest common checkpoint and write OUT_DIR/metrics.json
      and OUT_DIR/params.safetensors (both adapters).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from advrag.agents.arr import REASONER_STOP, VERIFIER_FINAL_STOP, VERIFIER_STOP
from advrag.datasets.records import QARecord, read_jsonl
from advrag.engines.local.dual import (
    AGENTS,
    AgentTrainers,
    agent_generators,
    separate_policies,
    shared_lora_policies,
)
from advrag.engines.local.policy import LoraSettings
from advrag.engines.local.trainer import TrainConfig, push_updated_weights, seed_everything
from advrag.models.loading import load_policy
from advrag.recipes.arr import ArrConfig
from advrag.recipes.arr.step import arr_step
from advrag.retrieval.retriever import load_retriever

REASONER = TrainConfig(lr=1e-2, warmup_steps=1, total_steps=4, decay="cosine", micro_batch_size=2,
                       max_seq_len=2048, kl_coef=0.01, seed=7)
VERIFIER = REASONER.model_copy(update={"lr": 5e-3, "decay": "linear"})  # its own schedule
SETTINGS = ArrConfig(group_size=2, max_turns=2, topk=2, max_new_tokens=6, lam=0.5, n_bins=4)
RECORDS_PER_STEP = 1
VOLATILE = ("time/", "tokens_per_s")  # wall-clock metrics differ between any two runs


class TaggingGenerator:
    """Wraps an agent's sampler: sampled text goes inside tags, answers chosen from it."""

    def __init__(self, inner, golds: Mapping[str, str]):
        self.inner, self.golds = inner, dict(golds)

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self.inner.chat_prompt(user, system)

    def push_weights(self, model) -> None:
        """The sampler's own copy (a LoRA agent's merged copy) gets the agent's new weights."""
        push = getattr(self.inner, "push_weights", None)
        if push is not None:
            push(model)

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        sampled = self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop=())
        return [self._tag(p, s.replace("<", " "), tuple(stop)) for p, s in zip(prompts, sampled)]

    def _tag(self, prompt: str, text: str, stop: tuple[str, ...]) -> str:
        question = next(q for q in self.golds if q in prompt)
        gold = self.golds[question]
        answer = [gold, gold.split()[-1] + " x", "unknown"][len(text) % 3]
        if stop == REASONER_STOP:
            return f"<think>{text}</think><search>{question}</search>"
        if stop == VERIFIER_STOP:
            said = gold if len(text) % 2 else ""
            return f"<verify>{text}</verify><selected_doc>Doc 1</selected_doc><response>{text} {said}</response>"
        if stop == VERIFIER_FINAL_STOP:
            return f"<verify>{text}</verify><final_answer>{answer}</final_answer>"
        return f"<think>{text}</think><answer>{answer}</answer>"  # forced answer, final predictor


def load_records(world_dir: Path) -> list[QARecord]:
    return [QARecord.from_json(row) for row in read_jsonl(Path(world_dir) / "train.jsonl")]


def build(model_dir: Path, records: list[QARecord], *, shared: bool = True):
    """Fresh policies from disk (adapters on one base, or two full models), trainers, samplers."""
    seed_everything(REASONER.seed)
    loaded = load_policy(str(model_dir))
    if shared:
        policies = shared_lora_policies(loaded.model, LoraSettings(r=4))
    else:
        second = load_policy(str(model_dir))
        policies = separate_policies({"reasoner": loaded.model, "verifier": second.model}, None)
    tokenizers = dict.fromkeys(AGENTS, loaded.tokenizer)
    dual = AgentTrainers.build(policies, tokenizers, {"reasoner": REASONER, "verifier": VERIFIER})
    golds = {r.question: r.golden_answers[0] for r in records}
    samplers = agent_generators(policies, tokenizers, temperature=1.0)
    return dual, {name: TaggingGenerator(g, golds) for name, g in samplers.items()}


def run(dual: AgentTrainers, generators, retriever, records: list[QARecord], *, position: int,
        until: int, checkpoint_root: Path | None = None,
        settings: ArrConfig = SETTINGS) -> dict[int, dict[str, float]]:
    """Joint updates until ``dual.step == until``, reading records from ``position`` on."""
    metrics = {}
    while dual.step < until:
        batch = [records[(position + i) % len(records)] for i in range(RECORDS_PER_STEP)]
        result = arr_step(dual, generators, retriever, batch, settings)
        metrics[dual.step] = {k: v for k, v in result.metrics.items()
                              if not any(part in k for part in VOLATILE)}
        position += RECORDS_PER_STEP
        if checkpoint_root is not None:
            dual.save(checkpoint_root, data_position=position, keep_last=2)
            print(f"checkpointed {dual.step}", flush=True)
    return metrics


def trainable_state(dual: AgentTrainers) -> dict[str, torch.Tensor]:
    """Every agent's trainable weights, keyed ``<agent>:<parameter name>``."""
    named = {id(p): n for n, p in dual["reasoner"].policy.model.named_parameters()}
    named |= {id(p): n for n, p in dual["verifier"].policy.model.named_parameters()}
    return {f"{agent}:{named[id(p)]}": p.detach().clone()
            for agent in AGENTS for p in dual[agent].policy.trainable_parameters()}


def main() -> None:
    from safetensors.torch import save_file

    parser = argparse.ArgumentParser()
    for name in ("model_dir", "world_dir", "index_dir", "checkpoints", "out"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--until", type=int, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = load_records(args.world_dir)
    retriever = load_retriever(args.index_dir)
    dual, generators = build(args.model_dir, records)
    position = 0
    if args.resume:
        position = dual.resume(args.checkpoints)["data_position"]
        for name, generator in generators.items():  # as RLRecipe.resume does
            push_updated_weights(generator, dual[name])
    metrics = run(dual, generators, retriever, records, position=position, until=args.until,
                  checkpoint_root=args.checkpoints)
    while args.hang:
        time.sleep(1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.json").write_text(json.dumps(metrics))
    save_file(trainable_state(dual), args.out / "params.safetensors")


if __name__ == "__main__":
    main()
