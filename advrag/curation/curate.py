"""UR²'s difficulty estimation: k rollouts per question, cached and resumable, then the buckets.

``estimate_scores`` runs a policy k times on every training question (the flow
passes the start policy; see ``difficulty`` for the paper's fixed scorer) through
a ``rollout`` callable, so any back-end fits, and scores each question
by its mean answer metric over the k rollouts (EM or F1; a rollout without an
answer scores 0, no format penalty: the score measures solving, not style).
Finished questions are appended to a ``ScoreCache`` file after every batch, so a
killed curation resumes without redoing them; the file's name carries the
policy's fingerprint, k and the rollout settings, so another policy never reads
these scores. ``curate`` then buckets the scores (``difficulty_level``) and draws
the 7:2:1 training sample (``sample_by_difficulty``); questions below the hard
threshold are the ``stage1`` table, from which the recipe takes the reasoning-only
ones as its stage-1 pool (UR² App. C.5, ``mixing.stage1_pool``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advrag.agents.types import Trajectory
from advrag.common import console
from advrag.common.fileio import atomic_dir, atomic_write_text
from advrag.core.metrics import normalize_answer
from advrag.core.rewards import ANSWER_METRICS
from advrag.curation.difficulty import RATIO, THRESHOLDS, difficulty_level, sample_by_difficulty
from advrag.datasets.records import QARecord

Rollout = Callable[[Sequence[QARecord]], list[Trajectory]]
"""Runs the policy once on each record (in order); one trajectory per record."""


def question_key(record: QARecord) -> str:
    """Cache key of a question: its id and a hash of its normalised text (an edit invalidates it)."""
    text = hashlib.sha256(normalize_answer(record.question).encode()).hexdigest()[:16]
    return f"{record.id}:{text}"


@dataclass(frozen=True)
class QuestionScore:
    """One question's k rollouts: its per-rollout answer scores and what the policy did."""

    key: str
    rewards: tuple[float, ...]
    searches: tuple[int, ...]
    format_errors: tuple[int, ...]

    @property
    def score(self) -> float:
        """The difficulty score s: the mean answer score over the k rollouts."""
        return sum(self.rewards) / len(self.rewards)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "rewards": list(self.rewards), "searches": list(self.searches),
                "format_errors": list(self.format_errors)}


class ScoreCache:
    """Append-only JSON lines of finished questions; a torn last line (a kill) is ignored."""

    def __init__(self, path: Path):
        self.path = path
        self.scores: dict[str, QuestionScore] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                    self.scores[row["key"]] = QuestionScore(
                        row["key"], tuple(row["rewards"]), tuple(row["searches"]),
                        tuple(row["format_errors"]))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # the line a killed run was writing

    def add(self, scores: Sequence[QuestionScore]) -> None:
        """Append ``scores`` and flush them to disk before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            if f.tell() and not self.path.read_bytes().endswith(b"\n"):
                f.write("\n")  # end a torn line so the new rows parse
            for s in scores:
                f.write(json.dumps(s.to_json()) + "\n")
                self.scores[s.key] = s
            f.flush()
            os.fsync(f.fileno())


def cache_path(cache_dir: Path, policy: str, k: int, settings: Mapping[str, Any]) -> Path:
    """The cache file of (policy fingerprint, k, rollout settings)."""
    digest = hashlib.sha256(json.dumps(dict(settings), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir / f"{policy[:16]}-k{k}-{digest}.jsonl"


def estimate_scores(records: Sequence[QARecord], rollout: Rollout, cache: ScoreCache, *,
                    k: int, metric: str = "f1", batch_questions: int = 8) -> list[QuestionScore]:
    """Each record's ``QuestionScore`` from ``k`` rollouts; cached ones are not rerun."""
    if k < 1:
        raise ValueError(f"k (rollouts per question) must be >= 1, got {k}")
    score_fn = ANSWER_METRICS[metric]
    pending = [r for r in records if question_key(r) not in cache.scores]
    done = len(records) - len(pending)
    with console.progress("curation", len(records) * k, "rollouts", initial=done * k) as bar:
        for start in range(0, len(pending), batch_questions):
            batch = pending[start:start + batch_questions]
            trajectories = rollout([r for r in batch for _ in range(k)])
            cache.add([_score(r, trajectories[i * k:(i + 1) * k], score_fn)
                       for i, r in enumerate(batch)])
            bar.update(len(trajectories))
    return [cache.scores[question_key(r)] for r in records]


def _score(record: QARecord, trajectories: Sequence[Trajectory], score_fn) -> QuestionScore:
    """One question's score from its k trajectories."""
    rewards = [score_fn(t.answer, record.golden_answers) if t.answer is not None else 0.0
               for t in trajectories]
    return QuestionScore(question_key(record), tuple(rewards),
                         tuple(t.n_searches for t in trajectories),
                         tuple(t.format_errors for t in trajectories))


def curate(records: Sequence[QARecord], scores: Sequence[QuestionScore], *, n: int | None,
           policy: str, k: int, thresholds: Mapping[str, float] = THRESHOLDS,
           ratio: Mapping[str, float] = RATIO, seed: int = 0) -> dict[str, list[dict]]:
    """The curated rows: ``scores`` (every question), ``curated`` (the sample), ``stage1``.

    Each row is the QA record plus ``level``, ``score``, ``k``, ``policy`` and the k
    per-rollout ``rewards``; ``n`` is the sample's size (None: as many as the ratio's
    levels hold).
    """
    rows = [{**r.to_json(), "level": difficulty_level(s.score, thresholds), "score": s.score,
             "k": k, "policy": policy, "rewards": list(s.rewards)}
            for r, s in zip(records, scores, strict=True)]
    levels = [row["level"] for row in rows]
    picked = sample_by_difficulty(levels, len(rows) if n is None else n, ratio, seed)
    return {"scores": rows, "curated": [rows[i] for i in picked],
            "stage1": [row for row in rows if row["level"] is None]}


def write_curated(out_dir: Path, tables: Mapping[str, list[dict]], summary: Mapping[str, Any],
                  check: Callable[[Path], None] | None = None) -> dict[str, Path]:
    """Write each table as ``<name>.jsonl`` plus ``summary.json``; name → final path.

    The files appear together (one directory swapped in) and only if
    ``check(path of curated.jsonl)`` returns; if it raises, ``out_dir`` keeps
    what it held before.
    """
    with atomic_dir(out_dir) as tmp:
        for name, rows in tables.items():
            atomic_write_text(tmp / f"{name}.jsonl", [json.dumps(row) + "\n" for row in rows])
        atomic_write_text(tmp / "summary.json", [json.dumps(dict(summary), indent=2), "\n"])
        if check is not None:
            check(tmp / "curated.jsonl")
    return {name: out_dir / f"{name}.jsonl" for name in tables} | {
        "summary": out_dir / "summary.json"}


def level_histogram(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Questions per level (``filtered`` for the ones below the hard threshold)."""
    counts = {"easy": 0, "medium": 0, "hard": 0, "filtered": 0}
    for row in rows:
        counts[row["level"] or "filtered"] += 1
    return counts


def policy_fingerprint(model_dir: str | os.PathLike[str]) -> str:
    """sha256 over a checkpoint's config and weight files (names and bytes): the policy's id."""
    root = Path(model_dir)
    files = sorted(p for p in root.iterdir() if p.name == "config.json"
                   or p.suffix in (".safetensors", ".bin", ".gguf"))
    if not files:
        raise FileNotFoundError(f"{root} holds no config.json or weight files: give a "
                                "transformers checkpoint directory")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()
