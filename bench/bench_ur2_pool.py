"""UR² over training seeds: each arm's held-out gain, averaged over seeds per question.

    python bench/bench_ur2_pool.py bench/results/ur2-long-warmup.json \
        bench/results/ur2-long-warmup-seed1.json ... --out bench/results/ur2-pooled.json

Each argument is a ``bench_ur2.py`` report with its ``_rows.jsonl`` beside it (a
report written before the rows existed gets them with ``bench_ur2.py --reuse-arms``
and the same arguments). Every run must have scored the same held-out questions.
For each pair (curated − start, uncurated − start, curated − uncurated) a
question's difference is averaged over the runs, and the 95 % interval is the
bootstrap over questions (``replicate_paired_diff_ci``): the spread between
these seeds is averaged out, not resampled. Each run's own difference is listed
beside the pooled one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reporting import write_report

from advrag.core.metrics import replicate_paired_diff_ci

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


def pooled(runs: dict[str, dict[str, dict[str, dict]]], ids: list[str], a: str, b: str) -> dict:
    """a − b per metric on questions ``ids``: averaged over runs per question, and each run's
    own mean."""
    out = {}
    for key in METRICS:
        a_scores = [[run[a][i][key] for i in ids] for run in runs.values()]
        b_scores = [[run[b][i][key] for i in ids] for run in runs.values()]
        diff, lo, hi = replicate_paired_diff_ci(a_scores, b_scores, n_boot=2000)
        per_run = {name: sum(x - y for x, y in zip(sa, sb)) / len(ids)
                   for name, sa, sb in zip(runs, a_scores, b_scores)}
        out[key] = {"diff": diff, "ci95": [lo, hi], "per_run": per_run}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path, nargs="+", help="bench_ur2.py reports")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ur2-pooled.json"))
    args = parser.parse_args()
    runs = {str(report): load_rows(report) for report in args.reports}
    ids = common_ids(runs)
    report = {"runs": list(runs), "questions": len(ids),
              "seeds": [json.loads(Path(r).read_text()).get("seed") for r in runs],
              "pooled": {f"{a}-{b}": pooled(runs, ids, a, b) for a, b in PAIRS}}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
