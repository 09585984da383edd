"""UR²'s task mixing as one batch of episodes: search where retrieval is asked, else reason directly.

Items flagged for retrieval run the search loop (``run_search_agent``) under UR²'s
search prompt (``ur2_search_prompt``: one fact per query, under the word limit, at most
``max_turns`` searches); the others get one direct step-by-step answer
(``answer_direct``: the facts are in the question). Trajectories come back in the
order of the questions, then REX-RAG's probes (of searching items only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from advrag.agents.baselines import answer_direct
from advrag.agents.prompts import ur2_search_prompt
from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator


def run_mixed_agent(questions: Sequence[str], retrieval: Sequence[bool], generator: TextGenerator,
                    retriever: Retriever, *, max_new_tokens: int, max_turns: int = 4,
                    **search_options: Any) -> list[Trajectory]:
    """One trajectory per question: the search loop where ``retrieval[i]``, else a direct answer.

    ``max_turns``: the search loop's turns, which the prompt states as the query budget
    (the paper's 4 by default); ``search_options`` go to ``run_search_agent``
    (``topk``, ``summariser``, ``prober``, …).
    """
    if len(retrieval) != len(questions):
        raise ValueError(f"{len(retrieval)} retrieval flags for {len(questions)} questions")
    searching = [i for i, flag in enumerate(retrieval) if flag]
    direct = [i for i, flag in enumerate(retrieval) if not flag]
    out: list[Trajectory | None] = [None] * len(questions)
    prober = search_options.pop("prober", None)
    if prober is not None:
        search_options["prober"] = prober.restricted(searching)
    prompt = partial(ur2_search_prompt, max_queries=max_turns)
    found = run_search_agent([questions[i] for i in searching], generator, retriever,
                             max_new_tokens=max_new_tokens, max_turns=max_turns, prompt=prompt,
                             **search_options) if searching else []
    _, answered = answer_direct([questions[i] for i in direct], generator, max_new_tokens)
    for i, trajectory in [*zip(searching, found), *zip(direct, answered)]:
        out[i] = trajectory
    probes = found[len(searching):]
    for probe in probes:
        probe.probe = replace(probe.probe, origin=searching[probe.probe.origin])
    return out + probes
