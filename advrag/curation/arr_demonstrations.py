"""Grounded ARR dialogues for the SFT warm-up of the reasoner and the verifier (the cold start).

A 135M model speaks neither agent's tag grammar, so every ARR group would
score the same and GRPO would learn nothing. As for the single agent
(``curation.demonstrations``), we write demonstrations from the offline
world's hop chains, here for both roles of the dialogue (a question without a chain, from
your own files, is one hop that searches the question itself: ``record_chain``):

    Reasoner  <think> I need the spouse of Leissti Naperkram. </think>
              <search> Leissti Naperkram spouse </search>
    Verifier  <verify> The query asks for the spouse of Leissti Naperkram; Doc 2 answers it. </verify>
              <selected_doc> Doc 2 </selected_doc>
              <response> The spouse of Leissti Naperkram is Kaheth Droube. </response>
    Reasoner  <verify> The feedback gives the spouse of Leissti Naperkram: Kaheth Droube. </verify>
              <think> The spouse of Leissti Naperkram is Kaheth Droube. I need … </think> …
              <answer> diplomat </answer>
    Verifier  <verify> The evidence supports the answer diplomat. </verify>
              <final_answer> diplomat </final_answer>
    Final     <answer> diplomat </answer>

The dialogues are produced by ``run_arr_dialogue`` itself, with scripted
agents writing the messages above and the real retriever answering the
searches, so their segment layout (prompts, documents, peer messages, forced
answer hints) is exactly that of real rollouts. A dialogue is kept only when
each hop's fact is in a retrieved document the verifier could select and the
whole dialogue parsed without a format error. ``max_turns`` counts the
reasoner's messages, the answer included (``run_arr_dialogue``), so a chain
of n hops needs n + 1 turns: chains of ``max_turns`` hops or more are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from advrag.agents.arr import (
    REASONER_STOP,
    VERIFIER_FINAL_STOP,
    VERIFIER_STOP,
    Dialogue,
    run_arr_dialogue,
)
from advrag.agents.prompts import FEEDBACK_CLOSE, INFO_OPEN
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever
from advrag.curation.demonstrations import fact_phrase, hop_query, plan_sentence
from advrag.datasets.records import QARecord

FINAL_PREDICTOR_MARK = "The rollout text of the reasoner and verifier is:"
_DOC_LINE = re.compile(r"^Doc (\d+)\(Title: ")


def record_chain(record: QARecord) -> list[dict]:
    """The hops a dialogue follows: the record's chain, or for a question without one (your
    data) a single hop that searches the question itself for its first golden answer."""
    chain = record.metadata.get("chain")
    if chain:
        return chain
    return [{"subject": record.question, "relation": "answer",
             "object": record.golden_answers[0], "query": record.question}]


def _sought(hop: dict) -> str:
    """What a hop asks for, as the messages name it."""
    if "query" in hop:
        return "the answer to the question"
    return fact_phrase(hop["relation"], hop["subject"])


def _query(hop: dict) -> str:
    return hop.get("query") or hop_query(hop)


def _need(hop: dict) -> str:
    return f"I need {_sought(hop)}."


def _found(hop: dict) -> str:
    sought = _sought(hop)
    return f"{sought[0].upper()}{sought[1:]} is {hop['object']}."


def _checked(hop: dict) -> str:
    return f"The feedback gives {_sought(hop)}: {hop['object']}."


def _first_thought(chain: Sequence[dict], plan: str | None) -> str:
    """The thought before the first search: the plan (when the dialogue states one), then
    what the first hop needs."""
    return _need(chain[0]) if plan is None else f"{plan} {_need(chain[0])}"


def reasoner_message(chain: Sequence[dict], done: int, answer: str, *, final: bool,
                     plan: str | None = None) -> str:
    """The reasoner's message after ``done`` hops: search the next hop, or answer. ``plan``:
    the question's facts, stated before the first search (``plan_sentence``)."""
    parts = [f"<verify> {_checked(chain[done - 1])} </verify>"] if done else []
    facts = " ".join(_found(h) for h in chain[:done])
    if final or done == len(chain):
        return "\n".join([*parts, f"<think> {facts} </think>", f"<answer> {answer} </answer>"])
    thought = f"{_found(chain[done - 1])} {_need(chain[done])}" if done else _first_thought(chain, plan)
    return "\n".join([*parts, f"<think> {thought} </think>",
                      f"<search> {_query(chain[done])} </search>"])


def grounded_doc(information: str, hop: dict) -> int | None:
    """Number of the first "Doc n" line of an ``<information>`` block holding the hop's fact."""
    for line in information.splitlines():
        match = _DOC_LINE.match(line)
        if match and hop["object"] in line:
            return int(match.group(1))
    return None


def verifier_message(hop: dict, doc: int | None) -> str:
    """The verifier's message for one search step: select the grounding document, restate it."""
    subject = _sought(hop)
    if doc is None:
        return (f"<verify> No document gives {subject}. </verify>\n"
                f"<response> The documents do not answer the query for {subject}. </response>")
    return (f"<verify> The query asks for {subject}; Doc {doc} answers it. </verify>\n"
            f"<selected_doc> Doc {doc} </selected_doc>\n<response> {_found(hop)} </response>")


class _Scripted:
    """Both agents of a demonstration dialogue: each message is written from the record's chain."""

    def __init__(self, records: Sequence[QARecord], chat_prompt: Callable[[str], str],
                 plan: bool):
        # longest question first, so a question that contains another is matched as itself
        self.records = sorted(records, key=lambda r: -len(r.question))
        self._chat_prompt = chat_prompt
        self.plan = plan

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self._chat_prompt(user)

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        return [self._message(p, tuple(stop)) for p in prompts]

    def _message(self, prompt: str, stop: tuple[str, ...]) -> str:
        record = next(r for r in self.records if r.question in prompt)
        chain, answer = record_chain(record), record.golden_answers[0]
        if stop == VERIFIER_STOP:
            hop = chain[prompt.count(INFO_OPEN) - 1]
            return verifier_message(hop, grounded_doc(prompt.rsplit(INFO_OPEN, 1)[1], hop))
        if stop == VERIFIER_FINAL_STOP:
            return (f"<verify> The evidence supports the answer {answer}. </verify>\n"
                    f"<final_answer> {answer} </final_answer>")
        if stop == REASONER_STOP:
            return reasoner_message(chain, prompt.count(FEEDBACK_CLOSE), answer, final=False,
                                    plan=self._plan(record, chain))
        if FINAL_PREDICTOR_MARK in prompt:
            return f"<answer> {answer} </answer>"
        return reasoner_message(chain, len(chain), answer, final=True)  # the forced answer

    def _plan(self, record: QARecord, chain: list[dict]) -> str | None:
        """The plan the reasoner states first, for a world question with ``plan`` on."""
        if not self.plan or "chain" not in record.metadata:
            return None
        return plan_sentence(chain, record.metadata.get("type") == "comparison")


def _kept(dialogue: Dialogue, record: QARecord) -> bool:
    """Every hop grounded in the selected document, the gold answered, nothing malformed."""
    chain, gold = record_chain(record), record.golden_answers[0]
    grounded = len(dialogue.steps) == len(chain) and all(
        step.selected is not None and hop["object"] in step.doc_texts[step.selected]
        for step, hop in zip(dialogue.steps, chain))
    answers = (dialogue.reasoner_answer, dialogue.verifier_answer, dialogue.final_answer)
    return grounded and answers == (gold, gold, gold) and not any(dialogue.format_errors.values())


def build_arr_demonstrations(
    records: Sequence[QARecord], retriever: Retriever, chat_prompt: Callable[[str], str], *,
    topk: int, max_turns: int, limit: int | None = None, plan: bool = False,
) -> list[Dialogue]:
    """Grounded demonstration dialogues for ``records`` (in order, at most ``limit``).

    Args:
        chat_prompt: renders a user message with the policy's chat template
            (``TextGenerator.chat_prompt``), so prompts match the rollouts'.
        topk, max_turns: the rollouts' settings; chains of ``max_turns`` hops or
            more (no turn left to answer) are skipped. A question without a chain
            searches itself (``record_chain``).
        plan: the reasoner's first thought states the question's facts first, as the
            single agent's demonstrations do ("Two facts: the spouse of X, then the
            profession of that person."); a question without a chain states none.
    """
    usable = [r for r in records if len(record_chain(r)) < max_turns]
    agents = _Scripted(usable, chat_prompt, plan)
    dialogues = run_arr_dialogue([r.question for r in usable], agents, agents, retriever,
                                 max_turns=max_turns, topk=topk, max_new_tokens=1)
    kept = [d for d, r in zip(dialogues, usable) if _kept(d, r)]
    return kept[:limit] if limit is not None else kept


def demonstration_trajectories(dialogues: Sequence[Dialogue]) -> list[Trajectory]:
    """What SFT learns from: each dialogue's reasoner, verifier and Final Predictor contexts."""
    return [t for d in dialogues for t in (d.reasoner, d.verifier, d.final)]
