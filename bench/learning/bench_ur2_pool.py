"""UR² over training seeds: each arm's held-out gain, averaged over seeds per question.

    python bench/learning/bench_ur2_pool.py bench/results/ur2-long-warmup.json \
        bench/results/ur2-long-warmup-seed1.json ... --out bench/results/ur2-pooled.json

Each argument is a ``bench_ur2.py`` report with its ``_rows.jsonl`` beside it (a
report written before the rows existed gets them with ``bench_ur2.py --reuse-arms``
and the same arguments). Every run must have scored the same held-out questions.
For each pair (curated − start, uncurated − start, curated − uncurated) a
question's difference is averaged over the runs, and the 95 % interval is the
bootstrap over questions (``replicate_paired_diff_ci``): the spread between
these seeds is averaged out, not resampled. Each run's own difference is listed
beside the pooled one. ``by_group``: the same for curated − start and
uncurated − start within each question type and hop count of ``--qa`` (the
held-out split the runs scored), to show where a gain comes from; with 15–34
questions a group, its intervals are wide.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from advrag.core.metrics import replicate_paired_diff_ci
from advrag.datasets.loaders import load_qa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import question_group, write_report

PAIRS = (("curated", "start"), ("uncurated", "start"), ("curated", "uncurated"))
METRICS = ("em", "f1", "format_errors", "n_searches")


def load_rows(report: Path) -> dict[str, dict[str, dict]]:
    """policy → question id → row, from the ``_rows.jsonl`` beside one report."""
    path = report.with_name(f"{report.stem}_rows.jsonl")
    if not path.is_file():
        raise SystemExit(f"{path}: no per-question rows for {report}; rerun bench_ur2.py with "
                         "the same arguments and --reuse-arms to write them")
    table: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        table.setdefault(row["policy"], {})[row["id"]] = row
    return table


def common_ids(runs: dict[str, dict[str, dict[str, dict]]]) -> list[str]:
    """The held-out question ids, which every policy of every run must share."""
    id_sets = {name: {policy: set(rows) for policy, rows in run.items()}
               for name, run in runs.items()}
    first = next(iter(next(iter(id_sets.values())).values()))
    for name, policies in id_sets.items():
        for policy, ids in policies.items():
            if ids != first:
                raise SystemExit(f"{name}: policy {policy!r} scored other questions than the "
                                 "first run; pool only runs with the same --heldout")
    return sorted(first)


def pooled(runs: dict[str, dict[str, dict[str, dict]]], ids: list[str], a: str, b: str,
           metrics: tuple[str, ...] = METRICS) -> dict:
    """a − b per metric on questions ``ids``: averaged over runs per question, and each run's
    own mean."""
    out = {}
    for key in metrics:
        a_scores = [[run[a][i][key] for i in ids] for run in runs.values()]
        b_scores = [[run[b][i][key] for i in ids] for run in runs.values()]
        diff, lo, hi = replicate_paired_diff_ci(a_scores, b_scores, n_boot=2000)
        per_run = {name: sum(x - y for x, y in zip(sa, sb)) / len(ids)
                   for name, sa, sb in zip(runs, a_scores, b_scores)}
        out[key] = {"diff": diff, "ci95": [lo, hi], "per_run": per_run}
    return out


def question_groups(qa_file: Path, ids: list[str]) -> dict[str, list[str]]:
    """``question_group`` label → the ids among ``ids`` in it, from the split's metadata."""
    labels = {record.id: question_group(record.metadata) for record in load_qa(qa_file)}
    missing = sorted(set(ids) - labels.keys())
    if missing:
        raise SystemExit(f"{qa_file} lacks {len(missing)} scored questions (e.g. {missing[0]}); "
                         "pass the split the runs evaluated with --qa")
    groups: dict[str, list[str]] = {}
    for question_id in ids:
        groups.setdefault(labels[question_id], []).append(question_id)
    return dict(sorted(groups.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path, nargs="+", help="bench_ur2.py reports")
    parser.add_argument("--qa", type=Path, default=Path("data/world/test.jsonl"),
                        help="the held-out split the runs scored (its metadata groups the questions)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2-pooled.json"))
    args = parser.parse_args()
    offline_world()
    runs = {str(report): load_rows(report) for report in args.reports}
    ids = common_ids(runs)
    report = {"runs": list(runs), "questions": len(ids),
              "seeds": [json.loads(Path(r).read_text()).get("seed") for r in runs],
              "pooled": {f"{a}-{b}": pooled(runs, ids, a, b) for a, b in PAIRS}}
    groups = question_groups(args.qa, ids)
    report["by_group"] = {
        group: {"questions": len(members)}
        | {f"{a}-{b}": pooled(runs, members, a, b, ("em", "f1")) for a, b in PAIRS[:2]}
        for group, members in groups.items()}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
