"""Synthetic protocol demonstrations for the SFT warm-up before RL (the cold start).

A 135M model ignores the think/search/answer grammar, so every GRPO group
scores the same and its advantages are zero (measured: all rewards −0.2).
Search-R1 and DeepSeek-R1 start RL from a model that already speaks the
protocol; we write such traces from the offline world's hop chains:

    <think> Two facts: the spouse of Leissti Naperkram, then the profession of
    that person. First, the spouse of Leissti Naperkram. </think>
    <search> Leissti Naperkram spouse </search>
    <information> ...real top-k passages... </information>
    <think> The spouse of Leissti Naperkram is Kaheth Droube. Next, the
    profession of Kaheth Droube. </think>
    <search> Kaheth Droube profession </search>
    <information> ... </information>
    <think> The spouse of Leissti Naperkram is Kaheth Droube. The profession of
    Kaheth Droube is diplomat. So the answer is diplomat. </think>
    <answer> diplomat </answer>

The first thought states the plan: how many facts, each in a grammatical phrase of its
relation (``FACT_PHRASES``), a later hop's subject named by what the hop before finds
("then the profession of that person"); each later thought states what was found and what
comes next with the bridge's name filled in: the chaining a multi-hop question needs.

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
    """``born_in`` → ``born in``: how a relation reads in a query."""
    return relation.replace("_", " ")


FACT_PHRASES = {
    "capital": "the capital of {s}",
    "population": "the population of {s}",
    "founding_year": "the year {s} was founded",
    "located_in": "the country {s} lies in",
    "birth_year": "the year {s} was born",
    "born_in": "the city where {s} was born",
    "profession": "the profession of {s}",
    "height_cm": "the height of {s} in centimetres",
    "spouse": "the spouse of {s}",
    "founded_by": "the founder of {s}",
    "headquartered_in": "the city where {s} has its headquarters",
    "industry": "the industry {s} is active in",
    "length_km": "the length of {s} in kilometres",
    "flows_through": "the country {s} flows through",
    "height_m": "the height of {s} in metres",
    "stands_in": "the country {s} stands in",
}
"""The world's relations as noun phrases about a subject: how a thought names a fact."""
BRIDGES = {"founded_by": "that person", "spouse": "that person", "born_in": "that city",
           "headquartered_in": "that city", "capital": "that city", "located_in": "that country",
           "flows_through": "that country", "stands_in": "that country"}
"""How a plan names a hop's object before it is known (the next hop's subject)."""
COUNTS = {1: "One fact", 2: "Two facts", 3: "Three facts"}


def fact_phrase(relation: str, subject: str) -> str:
    """The noun phrase of a fact: ``founded_by``, ``X`` → ``the founder of X`` (a relation
    the world does not have: ``the <relation words> of X``)."""
    template = FACT_PHRASES.get(relation, "the " + relation_words(relation) + " of {s}")
    return template.format(s=subject)


def found_sentence(hop: dict) -> str:
    """``The founder of X is Y.``: what a hop's passage established."""
    phrase = fact_phrase(hop["relation"], hop["subject"])
    return f"{phrase[0].upper()}{phrase[1:]} is {hop['object']}."


def plan_sentence(chain: Sequence[dict], comparison: bool) -> str:
    """The facts a question needs, stated before the first search: a chain's later hops name
    their subject by what the hop before finds (``then the year that person was born``)."""
    count = COUNTS.get(len(chain), f"{len(chain)} facts")
    if comparison:
        return f"{count} to compare: " + " and ".join(
            fact_phrase(h["relation"], h["subject"]) for h in chain) + "."
    phrases = [fact_phrase(chain[0]["relation"], chain[0]["subject"])]
    phrases += [fact_phrase(hop["relation"], BRIDGES.get(before["relation"], before["object"]))
                for before, hop in zip(chain, chain[1:])]
    return f"{count}: " + ", then ".join(phrases) + "."


def hop_query(hop: dict) -> str:
    """The search query for one hop: the subject's name and the relation."""
    return f"{hop['subject']} {relation_words(hop['relation'])}"


def _search_thought(chain: Sequence[dict], done: int, comparison: bool) -> str:
    """The thought before hop ``done``'s search: the plan first, then what was found and what
    comes next."""
    hop = chain[done]
    if done == 0:
        plan = plan_sentence(chain, comparison)
        return plan if len(chain) == 1 else f"{plan} First, {fact_phrase(hop['relation'], hop['subject'])}."
    return f"{found_sentence(chain[done - 1])} Next, {fact_phrase(hop['relation'], hop['subject'])}."


def _search_turn(thought: str, hop: dict) -> str:
    return f"<think> {thought} </think>\n<search> {hop_query(hop)} </search>"


def _answer_turn(thought: str, answer: str) -> str:
    return f"<think> {thought} </think>\n<answer> {answer} </answer>"


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
    comparison = record.metadata.get("type") == "comparison"
    for done, (hop, passages) in enumerate(zip(chain, passages_per_hop, strict=True)):
        traj.add(_search_turn(_search_thought(chain, done, comparison), hop), "policy")
        traj.add(information_block(format_docs(passages)), "env")
        traj.n_searches += 1
        traj.n_turns += 1
        traj.queries.append(hop_query(hop))
        traj.retrieved_ids.extend(p.id for p in passages)
        traj.search_ids.append(tuple(p.id for p in passages))
    if len(chain) == max_turns:
        traj.add(FORCE_ANSWER_HINT, "env")
    answer = record.golden_answers[0]
    facts = " ".join(found_sentence(hop) for hop in chain)
    traj.add(_answer_turn(f"{facts} So the answer is {answer}.", answer), "policy")
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
    traj.queries.append(record.question)
    traj.retrieved_ids.extend(p.id for p in passages)
    traj.search_ids.append(tuple(p.id for p in passages))
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
