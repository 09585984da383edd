"""What REX-RAG's probes do from a start policy: one probing rollout, no update.

    python bench/learning/bench_rex_probes.py --start MODEL_DIR [--config configs/rex-rag.yaml]
        [--questions 32] [--seed 0] [--out bench/results/rex_probes-start.json]

The RL protocol's REX-RAG arm opened 56 probes over 40 updates and none earned full marks
(docs/chaining-experiments.md). This study asks why, on the world's *training* questions (the
ones probes meet in training; no held-out question is read): ``--questions`` of them, evenly
over the question kinds, ``group_size`` rollouts each, as one REX-RAG rollout of the config
(its turns, budgets and pool) with every wrong answer probed (``probe_prob`` 1, the study's one
change, so every failure is seen). Writes the probes' outcomes over all of them and per question
kind (``rex_rag.step.probe_outcomes``: searches after the prompt, answers repeated or missing,
probe F1 against their origin's), how many probes each number of turns left had, and one probe as
the tokenizer encodes it, with its origin's answer and the gold answer.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from advrag.config import load_config
from advrag.datasets.records import QARecord, question_kind
from advrag.recipes.grpo import GrpoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from arm_records import model_digest
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("single", "two-hop", "three-hop", "comparison")


def balanced(records: list[QARecord], n: int) -> list[QARecord]:
    """The first ``n`` records taken in turn from each question kind (in ``KINDS`` order), so
    every kind is probed; fewer where the kinds run out."""
    queues = [[r for r in records if question_kind(r) == kind] for kind in KINDS]
    picked: list[QARecord] = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


def outcomes_by_kind(trajectories, answered, n: int, full_marks) -> dict[str, dict[str, float]]:
    """``probe_outcomes`` over all probes and over each question kind's, with their counts and
    how many earned full marks (``full_marks(answer, record)``)."""
    from advrag.recipes.rex_rag.step import probe_outcomes

    probes = list(range(n, len(trajectories)))
    groups = {"all": probes} | {kind: [i for i in probes if question_kind(answered[i]) == kind]
                                for kind in KINDS}
    out = {}
    for name, rows in groups.items():
        if not rows:
            continue
        kept = list(trajectories[:n]) + [trajectories[i] for i in rows]
        out[name] = {"probes": float(len(rows)), "full_marks": float(sum(
            full_marks(trajectories[i].answer, answered[i]) for i in rows))} | {
            key.removeprefix("rex/"): value for key, value in probe_outcomes(
                kept, list(answered[:n]) + [answered[i] for i in rows], n).items()}
    return out


def turns_left(trajectories, n: int, max_turns: int, prober) -> dict[str, int]:
    """How many probes got each number of turns before the forced answer: the turns their
    origin left (it answered at turn ``n_turns``), or the prober's ``probe_turns``."""
    return {str(k): v for k, v in sorted(Counter(
        prober.turns_for(max_turns - trajectories[t.probe.origin].n_turns)
        for t in trajectories[n:]).items())}


def shown_probe(trajectories, answered, n: int, tokenizer, max_len: int) -> dict | None:
    """The first chained question's probe (else the first probe) as the tokenizer encodes it:
    its decoded tokens, their count, its answer, its origin's and the gold ones."""
    from advrag.engines.local.tokenize import encode_trajectories

    probes = list(range(n, len(trajectories)))
    if not probes:
        return None
    chained = [i for i in probes if question_kind(answered[i]) in ("two-hop", "three-hop")]
    i = (chained or probes)[0]
    batch = encode_trajectories([trajectories[i]], tokenizer, max_len=max_len)
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    return {"question": answered[i].question, "kind": question_kind(answered[i]),
            "gold": answered[i].golden_answers,
            "origin_answer": trajectories[trajectories[i].probe.origin].answer,
            "probe_answer": trajectories[i].answer, "tokens": len(ids),
            "text": tokenizer.decode(ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=Path, required=True, help="the start policy")
    parser.add_argument("--config", default="configs/rex-rag.yaml")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/rex_probes-start.json"))
    args = parser.parse_args()
    if not (args.start / "config.json").exists():
        parser.error(f"--start: {args.start} holds no model; `make chaining-start` builds it")
    offline_world()
    from advrag.recipes.grpo import GrpoRecipe
    from advrag.recipes.rex_rag.step import probe_rollout
    from advrag.recipes.rollout import RolloutSettings
    from advrag.retrieval.retriever import load_retriever

    config = load_config(ROOT / args.config, GrpoConfig)
    if config.exploration is None:
        parser.error(f"--config: {args.config} does not explore (exploration: {{kind: rex}})")
    config = config.model_copy(update={
        "exploration": config.exploration.model_copy(update={"probe_prob": 1.0}),
        "optim": config.optim.model_copy(update={"seed": args.seed})})
    recipe = GrpoRecipe(config)
    recipe.build(str(args.start))
    records = balanced(recipe.training_questions(), args.questions)
    trainer, generator = recipe.trainers["reasoner"], recipe.generators["reasoner"]
    probed = probe_rollout(trainer, generator, load_retriever(config.index_dir, kind="dense"),
                           records, group_size=config.group_size, full_marks=recipe.full_marks,
                           exploration=config.exploration, seed=args.seed,
                           settings=RolloutSettings.of(config))
    t, answered, n = probed.trajectories, probed.answered, probed.policy_count
    write_report(ROOT / args.out if not args.out.is_absolute() else args.out, {
        "command": f"python bench/learning/bench_rex_probes.py --start {args.start} "
                   f"--config {args.config} --questions {args.questions} --seed {args.seed}",
        "start": str(args.start), "start_digest": model_digest(args.start),
        "questions": {kind: sum(question_kind(r) == kind for r in records) for kind in KINDS},
        "group_size": config.group_size, "max_turns": config.max_turns,
        "policy_trajectories": n,
        "policy_full_marks": sum(recipe.full_marks(x.answer, r)
                                 for x, r in zip(t[:n], answered[:n])) / n,
        "outcomes": outcomes_by_kind(t, answered, n, recipe.full_marks),
        "turns_left": turns_left(t, n, config.max_turns, probed.prober),
        "shown_probe": shown_probe(t, answered, n, trainer.tokenizer, config.optim.max_seq_len)})


if __name__ == "__main__":
    main()
