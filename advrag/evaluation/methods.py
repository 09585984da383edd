"""The benchmark's method registry: each method runs a batch of questions and returns outputs.

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

from advrag.agents.arr import render_dialogue, run_arr_dialogue
from advrag.agents.baselines import answer_cot, answer_naive_rag
from advrag.agents.search_loop import run_search_agent
from advrag.common.types import TextGenerator


@dataclass(frozen=True)
class Generators:
    """The policies a method may use: the reasoner (every method) and ARR's verifier.

    ``verifier`` None: the reasoner's policy plays the verifier too.
    """

    reasoner: TextGenerator
    verifier: TextGenerator | None = None


@dataclass
class MethodOutput:
    """What any method returns for one question."""

    prediction: str | None
    transcript: str
    retrieved_text: str = ""
    n_searches: int = 0
    format_errors: int = 0
    cut_turns: int = 0
    """Generations ``max_new_tokens`` cut before their stop (``Trajectory.cut_turns``)."""
    queries: tuple[str, ...] = ()
    """The search queries, in order."""
    retrieved_ids: tuple[tuple[str, ...], ...] = ()
    """The passage ids each search returned, in order."""
    agent_answers: tuple[tuple[str, str | None], ...] = ()
    """Each agent's own answer where a method has several (ARR: the reasoner's ``<answer>``
    and the verifier's ``<final_answer>``), as ``(agent, answer)`` pairs."""


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
        MethodOutput(prediction=read_prediction(t.answer, t), transcript=t.text,
                     retrieved_text=retriever.texts(t.retrieved_ids), n_searches=t.n_searches,
                     format_errors=t.format_errors, cut_turns=t.cut_turns,
                     queries=tuple(t.queries), retrieved_ids=tuple(t.search_ids))
        for t in trajs
    ]



def run_cot(questions, generators: Generators, retriever, s) -> list[MethodOutput]:
    """Chain of thought, no retrieval."""
    _, trajs = answer_cot(questions, generators.reasoner, max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


def run_naive_rag(questions, generators: Generators, retriever, s) -> list[MethodOutput]:
    """Retrieve top-k once for the question, then answer."""
    _, trajs = answer_naive_rag(questions, generators.reasoner, retriever, k=s.topk,
                                max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


def run_search_r1(questions, generators: Generators, retriever, s) -> list[MethodOutput]:
    """Search-R1-style single agent."""
    trajs = run_search_agent(questions, generators.reasoner, retriever, max_turns=s.max_turns,
                             topk=s.topk, max_new_tokens=s.max_new_tokens)
    return _outputs(trajs, retriever)


def run_arr(questions, generators: Generators, retriever, s) -> list[MethodOutput]:
    """ARR reasoner ⇄ verifier dialogue (one policy plays both roles without a verifier)."""
    verifier = generators.verifier or generators.reasoner
    dialogues = run_arr_dialogue(questions, generators.reasoner, verifier, retriever, max_turns=s.max_turns,
                                 topk=s.topk, max_new_tokens=s.max_new_tokens)
    return [
        MethodOutput(
            prediction=read_prediction(d.final_answer, d.final), transcript=render_dialogue(d.messages),
            retrieved_text="\n".join(t for step in d.steps for t in step.doc_texts),
            n_searches=len(d.steps),
            format_errors=d.reasoner.format_errors + d.verifier.format_errors,
            cut_turns=d.reasoner.cut_turns + d.verifier.cut_turns + d.final.cut_turns,
            queries=tuple(step.query for step in d.steps),
            retrieved_ids=tuple(tuple(step.doc_ids) for step in d.steps),
            agent_answers=(("reasoner", d.reasoner_answer), ("verifier", d.verifier_answer)),
        )
        for d in dialogues
    ]


METHODS = {
    "cot": run_cot,
    "naive_rag": run_naive_rag,
    "search_r1": run_search_r1,
    "arr": run_arr,
}


def run_method(method: str, questions, generators: Generators, retriever,
               settings) -> list[MethodOutput]:
    """Dispatch to one of ``METHODS`` (the benchmark's single entry point)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    return METHODS[method](questions, generators, retriever, settings)
