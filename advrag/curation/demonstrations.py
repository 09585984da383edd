"""Synthetic protocol demonstrations for the SFT warm-up before RL (the cold start).

A 135M model ignores the think/search/answer grammar, so every GRPO group
scores the same and its advantages are zero (measured: all rewards −0.2).
Search-R1 and DeepSeek-R1 start RL from a model that already speaks the
protocol; we write such traces from the offline world's hop chains:

    <think> I need the spouse of Leissti Naperkram. </think>
    <search> Leissti Naperkram spouse </search>
    <information> ...real top-k passages... </information>
    <think> The spouse of Leissti Naperkram is Kaheth Droube. I need the
    profession of Kaheth Droube. </think>
    <search> Kaheth Droube profession </search>
    <information> ... </information>
    <think> The profession of Kaheth Droube is diplomat. </think>
    <answer> diplomat </answer>

A question without a hop chain (your own data: a question and its golden answers) gets a
one-search trace instead: the question itself as the query, kept only when a golden answer
is in the retrieved passages (the answer given is the first golden answer found there).

The trajectories have exactly the segment layout ``run_search_agent`` builds
(prompt, then alternating "policy" and "env"), so SFT learns only the policy's
own tokens. The passages come from the real retriever; a demonstration is
kept only when every hop's fact is in the retrieved text, so the model is
taught to read its evidence rather than to guess. Chains longer than
``max_turns`` are skipped (the agent could not finish them); a chain of
exactly ``max_turns`` hops gets the loop's forced-answer hint before its
answer, as a real rollout would (the loop's turns include the answering one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from advrag.agents.prompts import FORCE_ANSWER_HINT, information_block, search_r1_prompt
from advrag.agents.types import Trajectory
from advrag.common.types import Passage, Retriever, format_docs
from advrag.datasets.records import QARecord


def relation_words(relation: str) -> str:
    """``born_in`` → ``born in``: how a relation reads in a query or a sentence."""
    return relation.replace("_", " ")


def hop_query(hop: dict) -> str:
    """The search query for one hop: the subject's name and the relation."""
    return f"{hop['subject']} {relation_words(hop['relation'])}"


def _need(hop: dict) -> str:
    return f"I need the {relation_words(hop['relation'])} of {hop['subject']}."


def _found(hop: dict) -> str:
    return f"The {relation_words(hop['relation'])} of {hop['subject']} is {hop['object']}."


def _search_turn(last_fact: str, hop: dict) -> str:
    thought = f"{last_fact} {_need(hop)}".strip()
    return f"<think> {thought} </think>\n<search> {hop_query(hop)} </search>"


def _answer_turn(facts: str, answer: str) -> str:
    return f"<think> {facts} </think>\n<answer> {answer} </answer>"


def _grounded(hop: dict, passages: Sequence[Passage]) -> bool:
    return any(hop["object"] in p.text for p in passages)


def demonstration(
    record: QARecord, prompt: str, passages_per_hop: Sequence[Sequence[Passage]], *,
    max_turns: int,
) -> Trajectory | None:
    """The demonstration for ``record`` given the passages each hop's query retrieved.

    A chain of exactly ``max_turns`` hops used up the search turns, so the
    loop's forced-answer hint precedes the answer, as in a real rollout.
    Returns None when the record has no hop chain, more hops than
    ``max_turns``, or a hop's fact is missing from its passages.
    """
    chain = record.metadata.get("chain") or []
    if not chain or len(chain) > max_turns or len(passages_per_hop) != len(chain):
        return None
    if not all(_grounded(h, p) for h, p in zip(chain, passages_per_hop, strict=True)):
        return None
    traj = Trajectory()
    traj.add(prompt, "prompt")
    facts: list[str] = []
    for hop, passages in zip(chain, passages_per_hop, strict=True):
        traj.add(_search_turn(facts[-1] if facts else "", hop), "policy")
        traj.add(information_block(format_docs(passages)), "env")
        traj.n_searches += 1
        traj.n_turns += 1
        traj.retrieved_ids.extend(p.id for p in passages)
        facts.append(_found(hop))
    if len(chain) == max_turns:
        traj.add(FORCE_ANSWER_HINT, "env")
    traj.add(_answer_turn(" ".join(facts), record.golden_answers[0]), "policy")
    traj.n_turns += 1
    traj.answer = record.golden_answers[0]
    return traj


def question_demonstration(record: QARecord, prompt: str, passages: Sequence[Passage], *,
                           max_turns: int) -> Trajectory | None:
    """The one-search demonstration of a question without a hop chain: search the question,
    answer with the first golden answer the passages hold; None when they hold none."""
    found = [a for a in record.golden_answers if any(a in p.text for p in passages)]
    if not found:
        return None
    traj = Trajectory()
    traj.add(prompt, "prompt")
    traj.add(f"<think> I need to find: {record.question} </think>\n"
             f"<search> {record.question} </search>", "policy")
    traj.add(information_block(format_docs(passages)), "env")
    traj.n_searches, traj.n_turns = 1, 1
    traj.retrieved_ids.extend(p.id for p in passages)
    if max_turns == 1:
        traj.add(FORCE_ANSWER_HINT, "env")
    traj.add(_answer_turn(f"The passages say the answer is {found[0]}.", found[0]), "policy")
    traj.n_turns += 1
    traj.answer = found[0]
    return traj


def build_demonstrations(
    records: Sequence[QARecord],
    retriever: Retriever,
    chat_prompt: Callable[[str], str],
    *,
    topk: int,
    max_turns: int,
    limit: int | None = None,
    prompt: Callable[[str], str] = search_r1_prompt,
) -> list[Trajectory]:
    """Grounded demonstrations for ``records`` (in order, at most ``limit``).

    Args:
        chat_prompt: renders the user message with the policy's chat
            template (``TextGenerator.chat_prompt``), so the prompt matches rollouts.
        prompt: question → the rollouts' user message (Search-R1's unless a recipe has its own).
        topk: passages per search, as in the rollouts.
        max_turns: the rollouts' search budget; longer chains are skipped.
    """
    usable = [r for r in records if len(r.metadata.get("chain") or []) <= max_turns]
    queries = [q for r in usable for q in demonstration_queries(r)]
    results = iter(retriever.search(queries, topk) if queries else [])
    demos = []
    for record in usable:
        passages = [next(results) for _ in demonstration_queries(record)]
        text = chat_prompt(prompt(record.question))
        demo = (demonstration(record, text, passages, max_turns=max_turns)
                if record.metadata.get("chain")
                else question_demonstration(record, text, passages[0], max_turns=max_turns))
        if demo is not None:
            demos.append(demo)
    return demos[:limit] if limit is not None else demos


def demonstration_queries(record: QARecord) -> list[str]:
    """The searches of ``record``'s demonstration: one per hop, else the question itself."""
    chain = record.metadata.get("chain")
    return [hop_query(h) for h in chain] if chain else [record.question]
