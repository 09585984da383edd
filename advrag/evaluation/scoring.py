"""Per-question scores of method outputs and their summaries (bootstrap 95 % intervals)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advrag.core.metrics import (
    bootstrap_ci,
    exact_match,
    f1_score,
    retrieval_recall,
    sub_exact_match,
)
from advrag.datasets.records import QARecord
from advrag.evaluation.methods import MethodOutput


def score_rows(records: Sequence[QARecord], outputs: Sequence[MethodOutput]) -> list[dict]:
    """One row per question: prediction, golds and every per-example metric."""
    if len(records) != len(outputs):
        raise ValueError(f"{len(records)} records but {len(outputs)} outputs")
    rows = []
    for record, out in zip(records, outputs):
        golds = record.golden_answers
        rows.append({
            "id": record.id, "question": record.question, "golden_answers": golds,
            "prediction": out.prediction or "", "em": exact_match(out.prediction, golds),
            "f1": f1_score(out.prediction, golds), "sub_em": sub_exact_match(out.prediction, golds),
            "retrieval_recall": retrieval_recall([out.retrieved_text], golds) if out.retrieved_text else 0.0,
            "n_searches": out.n_searches, "format_errors": out.format_errors,
            "transcript": out.transcript,
        })
    return rows


def summarize(rows: Sequence[dict], seed: int = 0) -> dict[str, float]:
    """Means over questions, with bootstrap 95 % intervals for EM and F1."""
    summary: dict[str, float] = {"n": float(len(rows))}
    for key in ("em", "f1"):
        mean, lo, hi = bootstrap_ci([r[key] for r in rows], seed=seed)
        summary.update({key: mean, f"{key}_lo": lo, f"{key}_hi": hi})
    for key in ("sub_em", "retrieval_recall", "n_searches", "format_errors"):
        summary[key] = float(np.mean([r[key] for r in rows])) if rows else 0.0
    return summary
