"""UR²'s task mixing as one batch of episodes: search where retrieval is asked, else reason directly.

Items flagged for retrieval run the Search-R1 loop (``run_search_agent``); the
others get one direct step-by-step answer (``answer_direct``: the facts are in
the question). Trajectories come back in the order of the questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from advrag.agents.baselines import answer_direct
from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator


def run_mixed_agent(questions: Sequence[str], retrieval: Sequence[bool], generator: TextGenerator,
                    retriever: Retriever, *, max_new_tokens: int, **search_options: Any
                    ) -> list[Trajectory]:
    """One trajectory per question: the search loop where ``retrieval[i]``, else a direct answer.

    ``search_options`` go to ``run_search_agent`` (``max_turns``, ``topk``, ``summariser``, …).
    """
    if len(retrieval) != len(questions):
        raise ValueError(f"{len(retrieval)} retrieval flags for {len(questions)} questions")
    searching = [i for i, flag in enumerate(retrieval) if flag]
    direct = [i for i, flag in enumerate(retrieval) if not flag]
    out: list[Trajectory | None] = [None] * len(questions)
    prober = search_options.pop("prober", None)
    if prober is not None:
        search_options["prober"] = prober.restricted(searching)
    found = run_search_agent([questions[i] for i in searching], generator, retriever,
                             max_new_tokens=max_new_tokens, **search_options) if searching else []
    _, answered = answer_direct([questions[i] for i in direct], generator, max_new_tokens)
    for i, trajectory in [*zip(searching, found), *zip(direct, answered)]:
        out[i] = trajectory
    probes = found[len(searching):]
    for probe in probes:
        probe.probe = replace(probe.probe, origin=searching[probe.probe.origin])
    return out + probes
