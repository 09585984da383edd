"""Per-question scores of method outputs and their summaries (bootstrap 95 % intervals)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advrag.agents.arr_scoring import answer_checks
from advrag.core.metrics import (
    bootstrap_ci,
    exact_match,
    f1_score,
    normalize_answer,
    retrieval_recall,
    sub_exact_match,
)
from advrag.datasets.records import QARecord, question_kind
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
            "cut_turns": out.cut_turns, "kind": question_kind(record),
            "queries": list(out.queries), "retrieved_ids": [list(ids) for ids in out.retrieved_ids],
            **hop_behaviour(record, out), **agent_scores(record, out),
            "transcript": out.transcript,
        })
    return rows


def agent_scores(record: QARecord, out: MethodOutput) -> dict[str, dict]:
    """Where the method has several agents: each one's answer and its EM (``agents``)."""
    if not out.agent_answers:
        return {}
    return {"agents": {agent: {"answer": answer,
                               "em": exact_match(answer, record.golden_answers)}
                       for agent, answer in out.agent_answers}}


def hop_behaviour(record: QARecord, out: MethodOutput) -> dict[str, list[bool]]:
    """For a world question (a hop chain in its metadata): ``hops_retrieved``, whether each
    gold hop's passage came back from any search, and ``chained``, for the k-th query
    (k ≥ 2, up to the chain's length), whether it names hop k−1's answer — the bridge a
    chained question must carry into its next search (a comparison's second query need
    not, so it gets none). Empty for a question without a chain."""
    chain = record.metadata.get("chain") or []
    if not chain:
        return {}
    seen = {pid for ids in out.retrieved_ids for pid in ids}
    bridged = record.metadata.get("type") == "compositional"
    chained = [f" {normalize_answer(chain[k - 1]['object'])} " in f" {normalize_answer(query)} "
               for k, query in enumerate(out.queries[1:len(chain)], start=1)] if bridged else []
    return {"hops_retrieved": [hop["passage_id"] in seen for hop in chain], "chained": chained}


def summarize(rows: Sequence[dict], seed: int = 0) -> dict[str, float]:
    """Means over questions, with bootstrap 95 % intervals for EM and F1."""
    summary: dict[str, float] = {"n": float(len(rows))}
    for key in ("em", "f1"):
        mean, lo, hi = bootstrap_ci([r[key] for r in rows], seed=seed)
        summary.update({key: mean, f"{key}_lo": lo, f"{key}_hi": hi})
    for key in ("sub_em", "retrieval_recall", "n_searches", "format_errors", "cut_turns"):
        summary[key] = float(np.mean([r.get(key, 0) for r in rows])) if rows else 0.0
    return summary | hop_rates(rows) | verifier_summary(rows)


def hop_rates(rows: Sequence[dict]) -> dict[str, float]:
    """Hop recall and chaining rate: the means of the rows' ``hop_behaviour`` flags, where
    they have any (none for questions without a chain)."""
    rates = {}
    for key, name in (("hops_retrieved", "hop_recall"), ("chained", "chaining_rate")):
        flags = [flag for r in rows for flag in r.get(key, [])]
        if flags:
            rates[name] = float(np.mean(flags))
    return rates


def verifier_summary(rows: Sequence[dict]) -> dict[str, float]:
    """For a method with a reasoner and a verifier (ARR): how the verifier's answer treats the
    reasoner's over the questions (``agents.arr_scoring.answer_checks``), as ``verifier/…``."""
    pairs = [r["agents"] for r in rows if {"reasoner", "verifier"} <= set(r.get("agents", {}))]
    if not pairs:
        return {}
    checks = answer_checks([p["reasoner"]["answer"] for p in pairs],
                           [p["verifier"]["answer"] for p in pairs],
                           [p["reasoner"]["em"] >= 1 for p in pairs],
                           [p["verifier"]["em"] >= 1 for p in pairs])
    return {f"verifier/{k}": v for k, v in checks.items()}


def kind_metrics(rows: Sequence[dict], seed: int = 0) -> dict[str, float]:
    """``summarize``'s means per question kind (``datasets.records.question_kind``), flat:
    ``kind/<kind>/<metric>`` for n, EM, F1, searches, cut turns, hop recall and chaining rate."""
    kinds: dict[str, list[dict]] = {}
    for row in rows:
        kinds.setdefault(row.get("kind", "untyped"), []).append(row)
    wanted = ("n", "em", "f1", "format_errors", "n_searches", "cut_turns", "hop_recall",
              "chaining_rate")
    return {f"kind/{kind}/{key}": value for kind, group in kinds.items()
            for key, value in summarize(group, seed).items() if key in wanted}
