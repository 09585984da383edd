"""What the benchmarks run on, prepared where absent: the offline world and its indexes, a tiny
model trained on the world's corpus, and rollouts laid out like Search-R1's.

A fresh clone has neither ``data/world`` nor ``processed/``. ``offline_world`` builds them as
`make demo` does — the world of ``configs/pipeline-demo.yaml``, then `dvc repro` of the data
stages — through the package's own calls (``advrag.ops.dataplane``), so no benchmark needs a
`make demo` first. Benchmarks import this module as a sibling of ``reporting`` (``bench/`` is
on their ``sys.path``).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_PIPELINE = ROOT / "configs/pipeline-demo.yaml"
PROMPT, POLICY, PASSAGES = 150, 64, 400  # tokens of a Search-R1-shaped rollout's segments


def offline_world(root: Path = ROOT) -> Path:
    """``root/data/world``, with its dense and BM25 indexes under ``root/processed/``; what is
    missing is built first (the world in under a second; the embedding of its passages about a
    minute on two cores). A world already there is kept as it is, whatever made it."""
    from advrag.config import PipelineConfig, load_config
    from advrag.ops import dataplane

    world_dir, index_dir = root / "data/world", root / "processed/index"
    if not (world_dir / "train.jsonl").is_file():
        world = load_config(DEMO_PIPELINE, PipelineConfig).data.world
        print(f"no world at {world_dir}: generating make demo's ({DEMO_PIPELINE.name})",
              flush=True)
        dataplane.build_world(world_dir, world.world_config())
    if not index_dir.is_dir():
        stages = list(dataplane.DATA_STAGES)
        print(f"no index at {index_dir}: dvc repro {' '.join(stages)}", flush=True)
        dataplane.reproduce(root, targets=stages)
    return world_dir


def tiny_model(world: Path, out: Path) -> Path:
    """A tiny random Llama with a BPE tokenizer trained on ``world``'s corpus, saved to ``out``."""
    from advrag.models.tiny import build_tiny_policy

    lines = (world / "corpus.jsonl").read_text().splitlines()
    return build_tiny_policy(out, [json.loads(line)["contents"] for line in lines])


def world_token_ids(tokenizer, passages: int = 300) -> list[int]:
    """Token ids of the world's first ``passages`` passages (the text rollouts are cut from)."""
    lines = (offline_world() / "corpus.jsonl").read_text().splitlines()
    text = " ".join(json.loads(line)["contents"] for line in lines[:passages])
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def search_r1_rollouts(tokenizer, batch: int) -> list:
    """``batch`` trajectories of world text with 0, 1 or 2 search rounds in turn: a prompt, then
    per round 64 policy tokens and ~400 tokens of passages (masked), then a 64-token answer
    (lengths ~280 to ~1200, as in a real step)."""
    from advrag.agents.types import Trajectory

    ids, cursor, out = world_token_ids(tokenizer), 0, []

    def take(n: int) -> str:
        nonlocal cursor
        cursor += n
        return tokenizer.decode(ids[cursor - n : cursor])

    for i in range(batch):
        trajectory = Trajectory()
        trajectory.add(take(PROMPT), "prompt")
        for _ in range(i % 3):
            trajectory.add(take(POLICY), "policy")
            trajectory.add(take(PASSAGES), "env")
        trajectory.add(take(POLICY), "policy")
        out.append(trajectory)
    return out
