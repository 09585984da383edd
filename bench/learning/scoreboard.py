"""One learning scoreboard: every learning record's held-out F1 per question kind, against its
start policy and against GRPO, from the per-question rows the records wrote.

    python bench/learning/scoreboard.py

A record's rows (``bench/results/<record>_rows.jsonl``: one line per policy and question, with
its F1 and, where the record kept it, the question's kind) are grouped by arm: a policy name
``<arm>-seed<k>`` is seed k of an arm. Each arm's F1 per kind is set against the record's start
policy on the same questions (each seed's row paired with the start's) and, where the record
trained GRPO, against GRPO's same seed; each question's F1 is averaged over the arm's seeds, so
``n`` counts questions and the paired bootstrap 95 % intervals
(``core.metrics.paired_bootstrap_diff_ci``, 2,000 resamples) resample questions. ``RECORDS`` states what each
record is: its page, world, budget and seeds, as the record's page gives them.

A record whose arms began from starts of different weights (rows ``start-<digest>``, rebuilt on
different kinds of CPU; the record's ``start_digests`` says which arm began where) pairs each
seed with its own start, shows each start as its own row, and adds beside "− GRPO" the
difference of the gains (each seed's F1 minus its own start's, against GRPO's same seed's
gain): the raw difference also holds the starts' difference. Writes
``bench/results/scoreboard.json``; docs/scoreboard.md shows it.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from advrag.core.metrics import paired_bootstrap_diff_ci

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

RESULTS = Path(__file__).resolve().parents[1] / "results"
KINDS = ("single", "two-hop", "three-hop", "comparison")
RECORDS = (
    {"record": "rex-rag", "page": "rex-rag-experiments.md", "start": "start", "grpo": "grpo",
     "world": "seed 13, 60-word passages, 4 turns",
     "budget": "24 updates × 8 rollouts (2 questions × 4)",
     "command": "python bench/learning/bench_rex_rag.py --seeds 0 1 2"},
    {"record": "rex-rag-chaining", "page": "chaining-experiments.md", "start": "start",
     "grpo": "grpo", "world": "seed 13, 60-word passages, 4 turns",
     "budget": "48 updates × 16 rollouts (4 questions × 4), from the chaining start",
     "command": "make bench-rl-chaining"},
    {"record": "gar-pipeline", "page": "gar-experiments.md", "start": "warmup", "grpo": None,
     "world": "seed 13, 100-word passages, 2 turns",
     "budget": "16 updates × 8 rollouts (2 questions × 4)",
     "command": "python bench/learning/bench_gar_pipeline.py --seeds 0 1"},
    {"record": "adversarial-chaining", "page": "chaining-experiments.md", "start": "start",
     "grpo": "grpo", "world": "seed 13, 60-word passages, 4 turns",
     "budget": "48 updates × 16 episodes (4 questions × 4), from the chaining start",
     "command": "make bench-adversarial"},
)
"""The learning records with per-question rows that name each question's kind; one whose rows
are not written yet (its first arm still running) is left off until they are."""
SEED = re.compile(r"^(?P<arm>.+?)(?:-seed(?P<seed>\d+))?$")


def arm_and_seed(policy: str) -> tuple[str, str]:
    """``rex-seed1`` → (``rex``, ``1``); a policy without a seed is its own arm, seed ``''``."""
    match = SEED.match(policy)
    return match["arm"], match["seed"] or ""


def load_rows(record: str) -> dict[str, dict[str, dict[str, dict]]]:
    """arm → seed → question id → row."""
    rows: dict = defaultdict(lambda: defaultdict(dict))
    for line in (RESULTS / f"{record}_rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        arm, seed = arm_and_seed(row["policy"])
        rows[arm][seed][row["id"]] = row
    return rows


def paired(a: dict[str, dict[str, dict]], b: dict[str, dict[str, dict]], kind: str | None
           ) -> tuple[list[float], list[float]]:
    """Per question, F1 of arm ``a`` and of ``b`` (``b``'s same seed, else its only seed), each
    averaged over ``a``'s seeds: one pair per question, so a bootstrap over the pairs resamples
    questions, not question-seed rows that share a question. ``kind`` None: every question."""
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for seed, questions in sorted(a.items()):
        other = b.get(seed) or next(iter(b.values()))
        for qid, row in questions.items():
            if qid in other and (kind is None or row.get("kind") == kind):
                pairs[qid].append((row["f1"], other[qid]["f1"]))
    means = [[sum(values) / len(values) for values in zip(*pairs[qid])] for qid in sorted(pairs)]
    return [m for m, _ in means], [t for _, t in means]


def difference(a, b, kind: str | None) -> dict | None:
    """Mean F1 of ``a`` minus ``b`` on the same questions, with its interval (None: no pairs)."""
    mine, theirs = paired(a, b, kind)
    if not mine:
        return None
    diff, lo, hi = paired_bootstrap_diff_ci(mine, theirs, n_boot=2000)
    return {"diff": diff, "ci": [lo, hi], "n": len(mine)}


def own_starts(spec: dict, rows: dict) -> dict[str, dict[str, dict]] | None:
    """arm → seed → the rows of the start that seed began from, where a record's arms began
    from starts of different digests (rows ``start-<digest>``; the record's ``start_digests``);
    None where they share the one start."""
    if spec["start"] in rows:
        return None
    digests = json.loads((RESULTS / f"{spec['record']}.json").read_text())["start_digests"]
    starts: dict = defaultdict(dict)
    for name, digest in digests.items():
        arm, seed = arm_and_seed(name)
        starts[arm][seed] = rows[f"{spec['start']}-{digest}"][""]
    return starts


def gains(seeds: dict[str, dict[str, dict]], starts: dict[str, dict]) -> dict[str, dict]:
    """seed → question id → row whose F1 is the seed's F1 minus its own start's."""
    return {seed: {qid: row | {"f1": row["f1"] - starts[seed][qid]["f1"]}
                   for qid, row in questions.items() if qid in starts[seed]}
            for seed, questions in seeds.items()}


def is_start(spec: dict, arm: str) -> bool:
    """Whether ``arm`` is the record's start (``start``) or one of its starts (``start-<digest>``)."""
    return arm == spec["start"] or arm.startswith(f"{spec['start']}-")


def record_rows(spec: dict) -> list[dict]:
    """One scoreboard row per (arm, kind) of a record, the start's own rows first."""
    rows = load_rows(spec["record"])
    grpo = rows.get(spec["grpo"]) if spec["grpo"] else None
    starts = own_starts(spec, rows)
    out = []
    for arm, seeds in rows.items():
        start = None if is_start(spec, arm) else (starts[arm] if starts else rows[spec["start"]])
        versus_grpo = grpo is not None and start is not None and arm != spec["grpo"]
        for kind in (None, *KINDS):
            mine, _ = paired(seeds, seeds, kind)
            if not mine:
                continue
            out.append({"record": spec["record"], "arm": arm, "seeds": sorted(seeds),
                        "kind": kind or "all", "n": len(mine), "f1": sum(mine) / len(mine),
                        "vs_start": None if start is None else difference(seeds, start, kind),
                        "vs_grpo": difference(seeds, grpo, kind) if versus_grpo else None,
                        "gain_vs_grpo": difference(gains(seeds, start),
                                                   gains(grpo, starts[spec["grpo"]]), kind)
                        if versus_grpo and starts else None})
    return out


def written(specs: tuple[dict, ...]) -> list[dict]:
    """The records of ``specs`` whose rows have been written."""
    return [spec for spec in specs if (RESULTS / f"{spec['record']}_rows.jsonl").exists()]


def main() -> None:
    records = written(RECORDS)
    write_report(RESULTS / "scoreboard.json", {
        "command": "python bench/learning/scoreboard.py",
        "records": records,
        "rows": [row for spec in records for row in record_rows(spec)]})


if __name__ == "__main__":
    main()
