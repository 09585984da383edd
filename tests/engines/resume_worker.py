"""A small GRPO run that checkpoints, for the kill-and-resume tests (also run as a script).

Rollouts are sampled (temperature 1) from a tiny random model, so a resumed
run only matches an uninterrupted one if the RNG state came back too.

Script use:
  python resume_worker.py MODEL_DIR WORLD_DIR CKPT_ROOT OUT_DIR --until 3 --hang
      train from scratch, checkpoint every 2 updates, print "checkpointed <step>"
      after each checkpoint, and after ``--until`` updates sleep until killed;
  python resume_worker.py MODEL_DIR WORLD_DIR CKPT_ROOT OUT_DIR --until 4 --resume
      resume from the latest checkpoint and write OUT_DIR/metrics.json
      (metrics per step) and OUT_DIR/params.safetensors (trainable weights).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from advrag.common.types import Passage
from advrag.datasets.records import QARecord, read_jsonl
from advrag.engines.local.checkpoint import latest_checkpoint
from advrag.engines.local.checkpoint_store import CheckpointStore
from advrag.engines.local.generation import HFGenerator
from advrag.engines.local.policy import LoraSettings, TrainablePolicy
from advrag.engines.local.trainer import LocalTrainer, TrainConfig, seed_everything
from advrag.models.loading import load_policy
from advrag.recipes.rollout import RolloutSettings
from advrag.recipes.search_agent.step import grpo_step

CONFIG = TrainConfig(
    lr=1e-2,
    warmup_steps=1,
    total_steps=4,
    decay="cosine",
    micro_batch_size=1,
    ppo_epochs=2,
    max_seq_len=640,
    kl_coef=0.01,
    seed=7,
)
ROLLOUT = RolloutSettings(max_turns=1, max_new_tokens=6, topk=1)
GROUP_SIZE = 2
RECORDS_PER_STEP = 1
CHECKPOINT_EVERY = 2
TIMING_METRICS = {"tokens_per_s", "rollout_s", "score_s", "update_s"}  # wall-clock


class OnePassage:
    """Returns the same passage for every query (retrieval is not what is tested here)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[Passage("p1", "Zorvath\nZorvath is a city.")] for _ in queries]


def reward(trajectory, record: QARecord) -> float:
    """A reward that varies with the sampled text, so advantages are not all zero."""
    return (len(trajectory.policy_text()) % 3) / 2


def load_records(world_dir: Path) -> list[QARecord]:
    return [QARecord.from_json(row) for row in read_jsonl(Path(world_dir) / "train.jsonl")]


def build(model_dir: Path, *, lora: bool) -> tuple[LocalTrainer, HFGenerator]:
    """A fresh model from disk, its trainer, and a sampling generator on the same weights."""
    seed_everything(CONFIG.seed)
    loaded = load_policy(str(model_dir))
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=4) if lora else None)
    trainer = LocalTrainer(policy, loaded.tokenizer, CONFIG)
    return trainer, HFGenerator(policy.model, loaded.tokenizer, temperature=1.0)


def run(
    trainer: LocalTrainer,
    generator: HFGenerator,
    records: list[QARecord],
    *,
    position: int,
    until: int,
    checkpoint_root: Path | None = None,
    store: CheckpointStore | None = None,
) -> dict[int, dict[str, float]]:
    """Train until ``trainer.step == until``, reading records from ``position`` on."""
    metrics = {}
    while trainer.step < until:
        step_records = [records[(position + i) % len(records)] for i in range(RECORDS_PER_STEP)]
        step_metrics = grpo_step(
            trainer, generator, OnePassage(), step_records, group_size=GROUP_SIZE, reward_fn=reward,
            settings=ROLLOUT
        )
        metrics[trainer.step] = {k: v for k, v in step_metrics.items() if k not in TIMING_METRICS}
        position += RECORDS_PER_STEP
        if checkpoint_root is not None and trainer.step % CHECKPOINT_EVERY == 0:
            saved = trainer.save(checkpoint_root, data_position=position, keep_last=2)
            if store is not None:
                store.push(saved)
            print(f"checkpointed {trainer.step}", flush=True)
    return metrics


def trainable_state(trainer: LocalTrainer) -> dict[str, torch.Tensor]:
    return {
        n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if p.requires_grad
    }


def main() -> None:
    from safetensors.torch import save_file

    parser = argparse.ArgumentParser()
    for name in ("model_dir", "world_dir", "checkpoints", "out"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--until", type=int, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer, generator = build(args.model_dir, lora=False)
    store = CheckpointStore.from_environment()  # ADVRAG_ARTIFACT_BUCKET: mirrored to S3
    position = 0
    if args.resume:
        if store is not None:
            store.pull(args.checkpoints)
        position = trainer.resume(latest_checkpoint(args.checkpoints))["data_position"]
    metrics = run(
        trainer,
        generator,
        load_records(args.world_dir),
        position=position,
        until=args.until,
        checkpoint_root=args.checkpoints,
        store=store,
    )
    while args.hang:
        time.sleep(1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.json").write_text(json.dumps(metrics))
    save_file(trainable_state(trainer), args.out / "params.safetensors")


if __name__ == "__main__":
    main()
