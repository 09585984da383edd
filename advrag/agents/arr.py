"""ARR reasoner ⇄ verifier dialogue with the Final Predictor (ARR §4.1, App. A.3), batched.

One episode per question; all unfinished questions advance together. A turn is:

1. Reasoner (one generate call over the active items; stop after ``</search>``
   or ``</answer>``): (verify →) think → search, or think → answer.
2. For every item that searched: ONE ``retriever.search`` call (top-``topk``);
   the Verifier receives ``<information>`` = the reasoner's output ("peer") +
   the documents ("env") and, in one generate call, writes ``<verify>``,
   ``<selected_doc>``, ``<response>`` (stop after ``</response>``).
3. The Reasoner receives ``<feedback>`` = the selected document's line ("env")
   + the verifier's response ("peer").

``max_turns`` = T counts reasoner messages, the answer included, as the
paper's steps do (a step is one reasoner and one verifier action; the last
one is (think, answer)): the reasoner speaks at most T times. Its T-th message,
if it has not answered yet, is a forced answer: ``FORCE_ANSWER_HINT`` then one
generation stopping at ``</answer>`` (answer read leniently, None if missing),
with no search after it. Then the Verifier gets each reasoner's last output in
``<information>`` and writes ``<verify>`` + ``<final_answer>`` (one call over
all items), and the Final Predictor (the *reasoner* generator, as in the
paper) reads the whole dialogue τ as a labelled transcript and answers (one
call). The transcript (``Dialogue.messages``) holds, in order, every reasoner
and verifier message, all documents each search returned (what the verifier
judged), and the document forwarded to the reasoner.

Malformed output never stops a dialogue (fallbacks):
- reasoner output with no usable action: ``INVALID_ACTION_HINT`` ("env"), next turn;
- verifier without ``<selected_doc>``: the query was judged ineffective, no
  document is forwarded (not an error); a ``<selected_doc>`` without a readable
  in-range "Doc n" forwards no document and counts as a format error; the paper's
  misprinted ``<selected_doc> Doc 1 <selected_doc>`` is read as Doc 1;
- verifier without a closed ``<response>``: the unclosed response's content,
  else nothing; with neither document nor response the reasoner gets
  ``NO_FEEDBACK_TEXT``;
- answers (reasoner, final answer, final predictor) are read with the lenient
  ``extract_answer``/``last_content`` rule and are None when absent.

Format errors are counted per message in each Trajectory's ``format_errors``.
The verifier's "policy" segments are, in order, one per ``RetrievalStep`` and
then the final verification, so training code can find the critique tokens.
How this departs from the paper (silent on these points): the transcript
format given to the Final Predictor is ours, and it leaves out the hints the
environment gives the reasoner (invalid action, forced answer, no feedback);
the forced last answer is ours. Unlike the single-agent loop (T searches, then
a forced answer), the forced answer here is inside the T turns.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from advrag.agents.baselines import extract_answer
from advrag.agents.probes import Prober, open_probe, without_answer
from advrag.agents.prompts import (
    FEEDBACK_CLOSE,
    FEEDBACK_OPEN,
    FORCE_ANSWER_HINT,
    INFO_CLOSE,
    INFO_OPEN,
    INVALID_ACTION_HINT,
    NO_FEEDBACK_TEXT,
    arr_final_predictor_prompt,
    arr_reasoner_prompt,
    arr_verifier_prompt,
)
from advrag.agents.protocol import extract_tags, last_content, parse_step
from advrag.agents.types import Trajectory, budget_cuts, one_episode
from advrag.common.types import (
    Passage,
    Retriever,
    TextGenerator,
    format_doc,
    format_docs,
    search_by_item,
)

REASONER_STOP = ("</search>", "</answer>")
VERIFIER_STOP = ("</response>",)
VERIFIER_FINAL_STOP = ("</final_answer>",)
_DOC_REF = re.compile(r"(?i)(?:doc\s*)?(\d{1,6})")


@dataclass
class RetrievalStep:
    """One reasoner search and what the verifier made of it (inputs to ARR's clarity term)."""

    turn: int
    query: str
    doc_ids: list[str]
    doc_texts: list[str]
    selected: int | None  # 0-based index of the document forwarded to the reasoner
    verifier_output: str


@dataclass
class Dialogue:
    """One question's ARR episode: both agents' trajectories, the final predictor, the steps.

    ``messages`` is the transcript as (speaker, text), speaker in {"Reasoner",
    "Search results", "Verifier", "Selected document"}; it is what the Final
    Predictor reads.
    """

    question: str
    reasoner: Trajectory = field(default_factory=Trajectory)
    verifier: Trajectory = field(default_factory=Trajectory)
    final: Trajectory = field(default_factory=Trajectory)
    steps: list[RetrievalStep] = field(default_factory=list)
    messages: list[tuple[str, str]] = field(default_factory=list)

    @property
    def reasoner_answer(self) -> str | None:
        """The reasoner's ``<answer>`` (None if it never gave one)."""
        return self.reasoner.answer

    @property
    def verifier_answer(self) -> str | None:
        """The verifier's ``<final_answer>`` after checking the reasoner's answer."""
        return self.verifier.answer

    @property
    def final_answer(self) -> str | None:
        """The Final Predictor's answer, read from the whole dialogue."""
        return self.final.answer

    @property
    def format_errors(self) -> dict[str, int]:
        """Malformed-message counts per role, for format rewards and logging."""
        return {
            "reasoner": self.reasoner.format_errors,
            "verifier": self.verifier.format_errors,
            "final": self.final.format_errors,
        }


def render_dialogue(messages: Sequence[tuple[str, str]]) -> str:
    """Labelled transcript, one "Speaker: text" block per message, for the Final Predictor."""
    return "\n".join(f"{speaker}: {text.strip()}" for speaker, text in messages)


def _last_reasoner_output(d: Dialogue) -> str:
    """The reasoner's most recent message (every dialogue has one once a turn has run)."""
    return next(text for speaker, text in reversed(d.messages) if speaker == "Reasoner")


def _reasoner_turn(
    dialogues: list[Dialogue], active: list[int], reasoner: TextGenerator, max_new_tokens: int
) -> dict[int, str]:
    """One batched reasoner generation; records answers, returns item → search query."""
    outputs = reasoner.generate(
        [dialogues[i].reasoner.text for i in active],
        max_new_tokens=max_new_tokens,
        stop=REASONER_STOP,
    )
    queries: dict[int, str] = {}
    for i, out, cut in zip(active, outputs, budget_cuts(reasoner, len(outputs)), strict=True):
        d = dialogues[i]
        d.reasoner.add(out, "policy")
        d.reasoner.n_turns += 1
        d.reasoner.cut_turns += int(cut)
        d.messages.append(("Reasoner", out))
        step = parse_step(out, ("search", "answer"), passive=("think", "verify"))
        d.reasoner.format_errors += int(step.error is not None)
        if step.kind == "answer":
            d.reasoner.answer = step.content
        elif step.kind == "search":
            queries[i] = step.content
        else:
            d.reasoner.add(INVALID_ACTION_HINT, "env")
    return queries


def _read_selected_doc(output: str, n_docs: int) -> tuple[int | None, bool]:
    """Verifier's chosen document as a 0-based index, and whether the choice was well-formed."""
    tag = next((t for t in extract_tags(output) if t.name == "selected_doc"), None)
    if tag is None:
        return None, True
    match = _DOC_REF.search(tag.content)
    if match is None or not 1 <= int(match.group(1)) <= n_docs:
        return None, False
    return int(match.group(1)) - 1, True


def _read_verifier_step(output: str, n_docs: int) -> tuple[int | None, str, bool]:
    """(selected doc index, response text, malformed?) from a verifier search-step message."""
    step = parse_step(output, ("response",), passive=("verify", "selected_doc"))
    response = step.content if step.kind == "response" else last_content(output, "response") or ""
    selected, doc_ok = _read_selected_doc(output, n_docs)
    return selected, response, step.error is not None or not doc_ok


def _send_information(d: Dialogue, reasoner_output: str, docs: str) -> None:
    """Append an ``<information>`` block to the verifier: reasoner text is "peer", docs "env"."""
    d.verifier.add(INFO_OPEN, "env")
    d.verifier.add(reasoner_output, "peer")
    d.verifier.add(f"\n{docs}{INFO_CLOSE}" if docs else INFO_CLOSE, "env")


def _send_feedback(d: Dialogue, doc_line: str | None, response: str) -> None:
    """Append ``<feedback>`` to the reasoner: selected document "env", verifier response "peer"."""
    d.reasoner.add(FEEDBACK_OPEN, "env")
    if doc_line is not None:
        d.reasoner.add(doc_line + ("\n" if response else ""), "env")
    d.reasoner.add(response, "peer")
    if doc_line is None and not response:
        d.reasoner.add(NO_FEEDBACK_TEXT, "env")
    d.reasoner.add(FEEDBACK_CLOSE, "env")


def _apply_verifier_step(
    d: Dialogue, turn: int, query: str, passages: list[Passage], output: str, cut: bool
) -> None:
    """Record one verifier search-step message and pass its feedback to the reasoner."""
    d.verifier.add(output, "policy")
    d.verifier.n_turns += 1
    d.verifier.cut_turns += int(cut)
    d.messages.append(("Verifier", output))
    selected, response, malformed = _read_verifier_step(output, len(passages))
    d.verifier.format_errors += int(malformed)
    doc_line = None if selected is None else format_doc(selected + 1, passages[selected])
    if doc_line is not None:
        d.messages.append(("Selected document", doc_line))
        d.reasoner.retrieved_ids.append(passages[selected].id)
    d.steps.append(
        RetrievalStep(
            turn, query, [p.id for p in passages], [p.contents for p in passages], selected, output
        )
    )
    _send_feedback(d, doc_line, response)


def _verify_searches(
    dialogues: list[Dialogue],
    queries: dict[int, str],
    retriever: Retriever,
    verifier: TextGenerator,
    *,
    turn: int,
    topk: int,
    max_new_tokens: int,
) -> None:
    """One batched retrieval and one batched verifier call for every item that searched."""
    results = search_by_item(retriever, queries, topk)
    if not results:
        return
    for i, passages in results.items():
        d = dialogues[i]
        d.reasoner.n_searches += 1
        d.verifier.retrieved_ids.extend(p.id for p in passages)
        docs = format_docs(passages)
        _send_information(d, _last_reasoner_output(d), docs)
        d.messages.append(("Search results", docs))
    outputs = verifier.generate(
        [dialogues[i].verifier.text for i in results],
        max_new_tokens=max_new_tokens,
        stop=VERIFIER_STOP,
    )
    cuts = budget_cuts(verifier, len(outputs))
    for (i, passages), out, cut in zip(results.items(), outputs, cuts, strict=True):
        _apply_verifier_step(dialogues[i], turn, queries[i], passages, out, cut)


def _force_answers(dialogues: list[Dialogue], reasoner: TextGenerator, max_new_tokens: int) -> None:
    """The last turn of items without an answer: the hint, then one forced generation."""
    pending = [d for d in dialogues if d.reasoner.answer is None]
    if not pending:
        return
    for d in pending:
        d.reasoner.add(FORCE_ANSWER_HINT, "env")
    outputs = reasoner.generate(
        [d.reasoner.text for d in pending], max_new_tokens=max_new_tokens, stop=("</answer>",)
    )
    for d, out, cut in zip(pending, outputs, budget_cuts(reasoner, len(outputs)), strict=True):
        d.reasoner.add(out, "policy")
        d.reasoner.n_turns += 1
        d.reasoner.cut_turns += int(cut)
        d.messages.append(("Reasoner", out))
        d.reasoner.answer = extract_answer(out)
        d.reasoner.format_errors += int(d.reasoner.answer is None)


def _verify_answers(
    dialogues: list[Dialogue], verifier: TextGenerator, max_new_tokens: int
) -> None:
    """Verifier checks each reasoner's last output and gives ``<final_answer>`` (one call)."""
    for d in dialogues:
        _send_information(d, _last_reasoner_output(d), "")
    outputs = verifier.generate(
        [d.verifier.text for d in dialogues],
        max_new_tokens=max_new_tokens,
        stop=VERIFIER_FINAL_STOP,
    )
    for d, out, cut in zip(dialogues, outputs, budget_cuts(verifier, len(outputs)), strict=True):
        d.verifier.add(out, "policy")
        d.verifier.n_turns += 1
        d.verifier.cut_turns += int(cut)
        d.messages.append(("Verifier", out))
        step = parse_step(out, ("final_answer",), passive=("verify",))
        d.verifier.answer = last_content(out, "final_answer")
        d.verifier.format_errors += int(step.error is not None)


def _final_predictions(
    dialogues: list[Dialogue], predictor: TextGenerator, max_new_tokens: int
) -> None:
    """The Final Predictor (reasoner weights) reads each whole transcript and answers (one call)."""
    for d in dialogues:
        user = arr_final_predictor_prompt(d.question, render_dialogue(d.messages))
        d.final.add(predictor.chat_prompt(user), "prompt")
    outputs = predictor.generate(
        [d.final.text for d in dialogues], max_new_tokens=max_new_tokens, stop=("</answer>",)
    )
    for d, out, cut in zip(dialogues, outputs, budget_cuts(predictor, len(outputs)), strict=True):
        d.final.add(out, "policy")
        d.final.n_turns = 1
        d.final.cut_turns = int(cut)
        d.final.answer = extract_answer(out)
        d.final.format_errors = int(d.final.answer is None)


def probe_dialogues(prober: Prober, dialogues: list[Dialogue], answered: Sequence[int]) -> None:
    """REX-RAG's probes of ARR dialogues (training only): a dialogue whose reasoner answered
    this turn below full marks is cloned with ``probe_prob``. In the clone the reasoner's
    answer (its ``<answer>`` action and what followed it) is cut from its trajectory and from
    the transcript, and the exploration prompt is added to the reasoner's context only (a
    hint, which the transcript leaves out). The clone goes on with the turns left; clones are
    appended after the dialogues, ``reasoner.probe`` naming their origin."""
    for i in answered:
        prompt = prober.draw(i, dialogues[i].reasoner)
        if prompt is None:
            continue
        clone = copy.deepcopy(dialogues[i])
        clone.reasoner = open_probe(dialogues[i].reasoner, origin=i, prompt_index=prompt,
                                    prompt=prober.pool[prompt])
        kept = without_answer(clone.messages[-1][1])
        if kept:
            clone.messages[-1] = ("Reasoner", kept)
        else:
            clone.messages.pop()
        dialogues.append(clone)


def run_arr_dialogue(
    questions: Sequence[str],
    reasoner: TextGenerator,
    verifier: TextGenerator,
    retriever: Retriever,
    *,
    max_turns: int = 4,
    topk: int = 3,
    max_new_tokens: int = 256,
    prober: Prober | None = None,
) -> list[Dialogue]:
    """Run ARR dialogues for all questions together; ``reasoner`` and ``verifier`` may be one object.

    ``max_turns`` (>= 1) bounds the reasoner's messages, the forced answer
    included. See the module docstring for the turn structure, batching and
    fallbacks. ``prober``: REX-RAG's probes of answers given in a free turn
    (``probe_dialogues``), returned after the ``len(questions)`` dialogues.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    dialogues = [Dialogue(q) for q in questions]
    if not dialogues:
        return []
    for d in dialogues:
        d.reasoner.add(reasoner.chat_prompt(arr_reasoner_prompt(d.question)), "prompt")
        d.verifier.add(verifier.chat_prompt(arr_verifier_prompt(d.question)), "prompt")
    with one_episode(reasoner, verifier):
        for turn in range(max_turns - 1):  # free turns; the T-th is the forced answer
            active = [i for i, d in enumerate(dialogues) if d.reasoner.answer is None]
            if not active:
                break
            queries = _reasoner_turn(dialogues, active, reasoner, max_new_tokens)
            if prober is not None:
                probe_dialogues(prober, dialogues,
                                [i for i in active if dialogues[i].reasoner.answer is not None])
            _verify_searches(dialogues, queries, retriever, verifier, turn=turn, topk=topk,
                             max_new_tokens=max_new_tokens)
        _force_answers(dialogues, reasoner, max_new_tokens)
        _verify_answers(dialogues, verifier, max_new_tokens)
        _final_predictions(dialogues, reasoner, max_new_tokens)
    return dialogues
