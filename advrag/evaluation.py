"""Score method outputs against gold answers and render result tables and plots.

Pure of tracking and orchestration: the benchmark task calls these and logs
what they return. Intervals are percentile-bootstrap 95 % CIs over questions.

Reading predictions: the answer is the content of the last ``<answer>`` (or
the ARR verifier's ``<final_answer>``). An untrained small model often answers
in plain prose without tags; the benchmark then scores its last generated line
with the tags stripped (``untagged_answer``), as FlashRAG scores raw outputs,
and still counts the broken grammar in ``format_errors``. Training rewards are
stricter: they read tags only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advrag.agents.arr import render_dialogue, run_arr_dialogue
from advrag.agents.baselines import answer_cot, answer_naive_rag
from advrag.agents.search_loop import run_search_agent
from advrag.core.metrics import (
    bootstrap_ci,
    exact_match,
    f1_score,
    retrieval_recall,
    sub_exact_match,
)
from advrag.datasets.records import QARecord


@dataclass
class MethodOutput:
    """What any method returns for one question."""

    prediction: str | None
    transcript: str
    retrieved_text: str = ""
    n_searches: int = 0
    format_errors: int = 0


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


def results_markdown(results: dict[tuple[str, str], dict[str, float]]) -> str:
    """Markdown table: one row per (method, dataset) with EM/F1 and their CIs."""
    lines = [
        "| method | dataset | n | EM | EM 95% CI | F1 | F1 95% CI | sub-EM | recall | searches |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, dataset), s in results.items():
        lines.append(
            f"| {method} | {dataset} | {int(s['n'])} | {s['em']:.3f} | "
            f"[{s['em_lo']:.3f}, {s['em_hi']:.3f}] | {s['f1']:.3f} | "
            f"[{s['f1_lo']:.3f}, {s['f1_hi']:.3f}] | {s['sub_em']:.3f} | "
            f"{s['retrieval_recall']:.3f} | {s['n_searches']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def results_figure(results: dict[tuple[str, str], dict[str, float]]):
    """Grouped bars of EM and F1 per method (one panel per dataset), CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({d for _, d in results})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        methods = [m for m, d in results if d == dataset]
        x = np.arange(len(methods))
        for offset, key in ((-0.2, "em"), (0.2, "f1")):
            stats = [results[(m, dataset)] for m in methods]
            means = np.array([s[key] for s in stats])
            err = np.array([[m - s[f"{key}_lo"] for m, s in zip(means, stats)],
                            [s[f"{key}_hi"] - m for m, s in zip(means, stats)]])
            bars = ax.bar(x + offset, means, 0.4, yerr=err, capsize=3, label=key.upper())
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
        top = max(results[(m, dataset)][f"{k}_hi"] for m in methods for k in ("em", "f1"))
        ax.set_xticks(x, methods)
        ax.set_ylim(0, min(1.0, max(0.1, 1.25 * top)))  # small scores stay readable
        ax.set_title(dataset)
        ax.legend()
    fig.tight_layout()
    return fig


class RecordingRetriever:
    """Wraps any retriever and remembers every passage it returned, by id.

    Lets the benchmark compute retrieval recall from a trajectory's
    ``retrieved_ids`` whatever the retriever is (local index or HTTP).
    """

    def __init__(self, inner):
        self.inner = inner
        self.seen: dict[str, str] = {}

    def search(self, queries, k):
        results = self.inner.search(queries, k)
        for passages in results:
            self.seen.update({p.id: p.contents for p in passages})
        return results

    def texts(self, ids: Sequence[str]) -> str:
        return "\n".join(self.seen.get(i, "") for i in ids)


_TAG = re.compile(r"</?[A-Za-z_]+\s*>")


def untagged_answer(text: str) -> str | None:
    """Last non-empty line of a generation with tags removed (fallback reading)."""
    lines = [line.strip() for line in _TAG.sub(" ", text).splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else None


def read_prediction(answer: str | None, trajectory) -> str | None:
    """The tagged answer, else the untagged reading of the last policy segment."""
    if answer is not None:
        return answer
    policy = [s.text for s in trajectory.segments if s.source == "policy"]
    return untagged_answer(policy[-1]) if policy else None


def _outputs(trajs, retriever: RecordingRetriever) -> list[MethodOutput]:
    """Trajectories → MethodOutputs."""
    return [
        MethodOutput(prediction=read_prediction(t.answer, t), transcript=t.text, retrieved_text=retriever.texts(t.retrieved_ids),
                     n_searches=t.n_searches, format_errors=t.format_errors)
        for t in trajs
    ]


def run_cot(questions, generator, retriever, s) -> list[MethodOutput]:
    """Chain of thought, no retrieval."""
    _, trajs = answer_cot(questions, generator, max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


def run_naive_rag(questions, generator, retriever, s) -> list[MethodOutput]:
    """Retrieve top-k once for the question, then answer."""
    _, trajs = answer_naive_rag(questions, generator, retriever, k=s.topk,
                                max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


def run_search_r1(questions, generator, retriever, s) -> list[MethodOutput]:
    """Search-R1-style single agent."""
    trajs = run_search_agent(questions, generator, retriever, max_turns=s.max_turns,
                             topk=s.topk, max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


class WithVerifier:
    """A generator (reasoner, single agent) carrying a separate ARR verifier.

    Every method but ``arr`` uses it as the plain generator it wraps; ``arr``
    gives the verifier role to ``verifier`` (e.g. a trained pair).
    """

    def __init__(self, generator, verifier):
        self.generator = generator
        self.verifier = verifier

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self.generator.chat_prompt(user, system)

    def generate(self, prompts, *, max_new_tokens: int, stop=()) -> list[str]:
        return self.generator.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)


def run_arr(questions, generator, retriever, s) -> list[MethodOutput]:
    """ARR reasoner ⇄ verifier dialogue (one policy plays both roles unless a ``WithVerifier``)."""
    verifier = generator.verifier if isinstance(generator, WithVerifier) else generator
    dialogues = run_arr_dialogue(questions, generator, verifier, retriever, max_turns=s.max_turns,
                                 topk=s.topk, max_new_tokens=s.max_new_tokens)
    return [
        MethodOutput(
            prediction=read_prediction(d.final_answer, d.final), transcript=render_dialogue(d.messages),
            retrieved_text="\n".join(t for step in d.steps for t in step.doc_texts),
            n_searches=len(d.steps),
            format_errors=d.reasoner.format_errors + d.verifier.format_errors,
        )
        for d in dialogues
    ]


METHODS = {
    "cot": run_cot,
    "naive_rag": run_naive_rag,
    "search_r1": run_search_r1,
    "arr": run_arr,
}


def run_method(method: str, questions, generator, retriever, settings) -> list[MethodOutput]:
    """Dispatch to one of ``METHODS`` (the benchmark's single entry point)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    return METHODS[method](questions, generator, retriever, settings)
