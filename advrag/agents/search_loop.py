"""Search-R1-style single agent: think → search → information → ... → answer, batched.

All unfinished questions advance together: each turn makes ONE
``generator.generate`` call over their contexts (stopping after ``</search>`` or
``</answer>``) and ONE ``retriever.search`` call for every item that searched.

Per turn and item:
- a closed ``<answer>`` ends the item (``Trajectory.answer`` is its content);
- a closed ``<search>`` appends the top-k documents as an ``<information>``
  block ("env"); with a UR² ``summariser`` the block holds their summary, the
  fallback message (counted in ``fallbacks``; with ``fallback_hint``,
  ``FALLBACK_HINT`` follows the block as "env", App. C.4) or, when summarising
  failed, the raw documents;
- anything else (no usable action) appends ``INVALID_ACTION_HINT`` ("env") and
  the item goes on to the next turn;
- ``format_errors`` counts turns whose output has any protocol error
  (``Step.error``), including ones whose action was still usable
  (e.g. ``<Search>``), so a format reward can use it.

After ``max_turns`` turns, items without an answer get ``FORCE_ANSWER_HINT``
("env") and one last generation (stop ``</answer>``); its answer is read
leniently with ``extract_answer`` and stays None if there is none (that turn
then counts as a format error). ``n_turns`` counts generations, the forced one
included; ``cut_turns`` counts generations ``max_new_tokens`` cut (where the generator
reports it: ``budget_cuts``). Text a generator produces after the action is kept in the trajectory
(it was sampled) but not acted on.

With a REX-RAG ``prober`` (training only), items that answered in one of the
``max_turns`` turns may be cloned into probes (``agents.probes``): they join the
batch at the next turn and get the turns left (or the prober's ``probe_turns``),
then the forced answer like any other item. Probes come back after the policy
trajectories.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from advrag.agents.baselines import extract_answer
from advrag.agents.probes import Prober
from advrag.agents.prompts import (
    FALLBACK_HINT,
    FORCE_ANSWER_HINT,
    INVALID_ACTION_HINT,
    information_block,
    search_r1_prompt,
)
from advrag.agents.protocol import parse_step
from advrag.agents.types import Trajectory, budget_cuts, one_episode
from advrag.common.types import (
    Passage,
    Retriever,
    Summariser,
    TextGenerator,
    format_docs,
    search_by_item,
)

ACTIONS = ("search", "answer")
STOP = ("</search>", "</answer>")


def _agent_turn(
    trajs: list[Trajectory], active: list[int], generator: TextGenerator, max_new_tokens: int
) -> dict[int, str]:
    """One batched generation for the active items; returns item → search query."""
    outputs = generator.generate(
        [trajs[i].text for i in active], max_new_tokens=max_new_tokens, stop=STOP
    )
    queries: dict[int, str] = {}
    cuts = budget_cuts(generator, len(outputs))
    for i, out, cut in zip(active, outputs, cuts, strict=True):
        traj = trajs[i]
        traj.add(out, "policy")
        traj.n_turns += 1
        traj.cut_turns += int(cut)
        step = parse_step(out, ACTIONS)
        traj.format_errors += int(step.error is not None)
        if step.kind == "answer":
            traj.answer = step.content
        elif step.kind == "search":
            queries[i] = step.content
        else:
            traj.add(INVALID_ACTION_HINT, "env")
    return queries


def _information(
    found: dict[int, list[Passage]], queries: dict[int, str], summariser: Summariser | None
) -> dict[int, tuple[str, bool]]:
    """Item → (body of its ``<information>`` block, whether it is the fallback message)."""
    if summariser is None:
        return {i: (format_docs(passages), False) for i, passages in found.items()}
    summaries = summariser.summarise([(queries[i], passages) for i, passages in found.items()])
    return {i: (s.text, s.kind == "fallback") for i, s in zip(found, summaries, strict=True)}


def _retrieve_into(
    trajs: list[Trajectory], queries: dict[int, str], retriever: Retriever, topk: int,
    summariser: Summariser | None, fallback_hint: bool,
) -> None:
    """One batched retrieval (and summarisation) for all items that searched; append as "env"."""
    found = search_by_item(retriever, queries, topk)
    for i, (body, fell_back) in _information(found, queries, summariser).items():
        trajs[i].add(information_block(body), "env")
        trajs[i].n_searches += 1
        trajs[i].queries.append(queries[i])
        trajs[i].retrieved_ids.extend(p.id for p in found[i])
        trajs[i].search_ids.append(tuple(p.id for p in found[i]))
        trajs[i].fallbacks += int(fell_back)
        if fell_back and fallback_hint:
            trajs[i].add(FALLBACK_HINT, "env")


def _force_answers(
    trajs: list[Trajectory], pending: list[int], generator: TextGenerator, max_new_tokens: int
) -> None:
    """Last chance for items still without an answer: hint, generate once, read leniently."""
    if not pending:
        return
    for i in pending:
        trajs[i].add(FORCE_ANSWER_HINT, "env")
    outputs = generator.generate(
        [trajs[i].text for i in pending], max_new_tokens=max_new_tokens, stop=("</answer>",)
    )
    for i, out, cut in zip(pending, outputs, budget_cuts(generator, len(outputs)), strict=True):
        trajs[i].add(out, "policy")
        trajs[i].n_turns += 1
        trajs[i].cut_turns += int(cut)
        trajs[i].answer = extract_answer(out)
        trajs[i].format_errors += int(trajs[i].answer is None)


def run_search_agent(
    questions: Sequence[str],
    generator: TextGenerator,
    retriever: Retriever,
    *,
    max_turns: int = 4,
    topk: int = 3,
    max_new_tokens: int = 256,
    summariser: Summariser | None = None,
    fallback_hint: bool = True,
    prober: Prober | None = None,
    prompt: Callable[[str], str] = search_r1_prompt,
) -> list[Trajectory]:
    """Run the Search-R1 agent on all questions together; one Trajectory per question.

    Segments: the rendered prompt is "prompt", model output "policy", documents
    and hints "env". See the module docstring for turn and error handling.
    ``summariser``: UR²'s summarised retrieval (None = raw documents);
    ``fallback_hint``: show ``FALLBACK_HINT`` after a fallback (UR² does in training);
    ``prober``: REX-RAG's probes (returned after the ``len(questions)`` policy trajectories);
    ``prompt``: question → user message (UR² passes its own, ``ur2_search_prompt``).
    """
    trajs = [Trajectory() for _ in questions]
    for traj, question in zip(trajs, questions):
        traj.add(generator.chat_prompt(prompt(question)), "prompt")
    turns_left = [max_turns] * len(trajs)
    with one_episode(generator):
        while active := [i for i, t in enumerate(trajs) if t.answer is None and turns_left[i]]:
            queries = _agent_turn(trajs, active, generator, max_new_tokens)
            _retrieve_into(trajs, queries, retriever, topk, summariser, fallback_hint)
            for i in active:
                turns_left[i] -= 1
            if prober is not None:
                opened = prober.probe_answers(
                    trajs, [i for i in active if trajs[i].answer is not None])
                turns_left += [prober.turns_for(turns_left[trajs[j].probe.origin]) for j in opened]
        _force_answers(
            trajs, [i for i, t in enumerate(trajs) if t.answer is None], generator, max_new_tokens
        )
    return trajs
