"""What UR² curation's rollouts solve, per question type and hop count (no new rollouts).

    python bench/learning/bench_ur2_curation.py .cache/advrag/bench-ur2-long-warmup/curation \
        .cache/advrag/bench-ur2-long-warmup-seed1/curation ... --out bench/results/ur2-curation-by-type.json

Reads the ``scores.jsonl`` of curation runs of one policy with one k (each
question once, however many runs scored it) and counts, per (type, hops), the
questions, their rollouts, the rollouts with any answer credit and the fully
correct ones, and each level's questions. It answers whether a larger k could
bring a question type into the curated sample: a type with no correct rollout
among hundreds cannot reach the 0.2 mean score that ``hard`` needs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import question_group, write_report


def scored_questions(curation_dirs: list[Path]) -> dict[str, dict]:
    """Question id → its score row, over all runs (which must share one policy and k)."""
    rows: dict[str, dict] = {}
    for directory in curation_dirs:
        for line in (directory / "scores.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows[row["id"]] = row
    settings = {(row["policy"], row["k"]) for row in rows.values()}
    if len(settings) > 1:
        raise SystemExit(f"these curation runs scored with different (policy, k): {sorted(settings)}")
    return rows


def by_type(rows: dict[str, dict]) -> dict[str, dict]:
    """Per "type, hops" (``question_group``): questions, rollouts, rollouts
    with credit, correct rollouts, levels."""
    table: dict[str, dict] = defaultdict(lambda: {"questions": 0, "rollouts": 0, "credited": 0,
                                                  "correct": 0, "levels": defaultdict(int)})
    for row in rows.values():
        cell = table[question_group(row["metadata"])]
        cell["questions"] += 1
        cell["rollouts"] += len(row["rewards"])
        cell["credited"] += sum(reward > 0 for reward in row["rewards"])
        cell["correct"] += sum(reward >= 1.0 for reward in row["rewards"])
        cell["levels"][row.get("level") or "filtered"] += 1
    return {key: {**cell, "levels": dict(cell["levels"])} for key, cell in sorted(table.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("curation_dirs", type=Path, nargs="+", help="curation output folders")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2-curation-by-type.json"))
    args = parser.parse_args()
    rows = scored_questions(args.curation_dirs)
    first = next(iter(rows.values()))
    write_report(args.out, {"runs": [str(d) for d in args.curation_dirs], "questions": len(rows),
                            "policy": first["policy"], "k": first["k"], "by_type": by_type(rows)})


if __name__ == "__main__":
    main()
