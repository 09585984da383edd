"""SFT demonstrations: grounded, protocol-valid, laid out exactly like real rollouts."""

from __future__ import annotations

import pytest
from fakes import KeywordRetriever, ScriptedGenerator

from advrag.agents.protocol import parse_step
from advrag.agents.search_loop import run_search_agent
from advrag.common.types import Passage
from advrag.curation.demonstrations import build_demonstrations, demonstration, hop_query
from advrag.datasets.records import QARecord

CORPUS = [
    Passage("a", "Ada Vell\nAda Vell is married to Bo Rask. Ada Vell was born in Tarn."),
    Passage("b", "Bo Rask\nBo Rask works as a diplomat. Bo Rask was born in 1901."),
    Passage("c", "Tarn\nTarn is a city on the river Ost."),
]
TWO_HOP = QARecord(
    "q1", "What was the profession of the spouse of Ada Vell?", ["diplomat"],
    {"type": "compositional", "chain": [
        {"subject": "Ada Vell", "relation": "spouse", "object": "Bo Rask", "passage_id": "a"},
        {"subject": "Bo Rask", "relation": "profession", "object": "diplomat", "passage_id": "b"},
    ]},
)


def policy_texts(trajectory) -> list[str]:
    return [s.text for s in trajectory.segments if s.source == "policy"]


def test_two_hop_demonstration_reads_its_evidence_and_answers():
    retriever = KeywordRetriever(CORPUS)
    [demo] = build_demonstrations([TWO_HOP], retriever, lambda u: f"<u>{u}</u>", topk=2,
                                  max_turns=2)
    assert retriever.calls == [["Ada Vell spouse", "Bo Rask profession"]]  # one batched search
    assert policy_texts(demo) == [
        "<think> Two facts: the spouse of Ada Vell, then the profession of that person. First, "
        "the spouse of Ada Vell. </think>\n<search> Ada Vell spouse </search>",
        "<think> The spouse of Ada Vell is Bo Rask. Next, the profession of Bo Rask. </think>\n"
        "<search> Bo Rask profession </search>",
        "<think> The spouse of Ada Vell is Bo Rask. The profession of Bo Rask is diplomat. "
        "So the answer is diplomat. </think>\n<answer> diplomat </answer>",
    ]
    assert [s.source for s in demo.segments] == ["prompt", "policy", "env", "policy", "env",
                                                 "env", "policy"]  # + the forced-answer hint
    assert (demo.answer, demo.n_searches, demo.n_turns) == ("diplomat", 2, 3)
    steps = [parse_step(text, ("search", "answer")) for text in policy_texts(demo)]
    assert [(s.kind, s.error) for s in steps] == [("search", None), ("search", None),
                                                  ("answer", None)]


@pytest.mark.parametrize("max_turns", [2, 3])
def test_demonstration_is_exactly_what_the_search_agent_would_build(max_turns):
    """Replaying the demo's policy turns through the real loop gives the identical text."""
    retriever = KeywordRetriever(CORPUS)
    generator = ScriptedGenerator({})
    [demo] = build_demonstrations([TWO_HOP], retriever, generator.chat_prompt, topk=2,
                                  max_turns=max_turns)
    turns = policy_texts(demo)
    generator.rules = {"Bo Rask profession": turns[2], "Ada Vell spouse": turns[1]}
    generator.default = turns[0]
    [replayed] = run_search_agent([TWO_HOP.question], generator, retriever,
                                  max_turns=max_turns, topk=2)
    assert replayed.text == demo.text
    assert [s.source for s in replayed.segments] == [s.source for s in demo.segments]
    assert (replayed.answer, replayed.format_errors) == ("diplomat", 0)


def test_ungrounded_or_too_long_chains_are_skipped():
    missing = [[Passage("x", "Other\nNothing about it.")], [CORPUS[1]]]
    assert demonstration(TWO_HOP, "p", missing, max_turns=2) is None  # "Bo Rask" not retrieved
    assert demonstration(QARecord("q", "?", ["x"], {}), "p", [], max_turns=2) is None  # no chain
    retriever = KeywordRetriever(CORPUS)
    assert build_demonstrations([TWO_HOP], retriever, str, topk=2, max_turns=1) == []
    assert retriever.calls == []  # nothing to search for


def test_hop_query_and_limit():
    assert hop_query({"subject": "Ada Vell", "relation": "born_in"}) == "Ada Vell born in"
    records = [TWO_HOP, QARecord("q2", "Where was Ada Vell born?", ["Tarn"], {"chain": [
        {"subject": "Ada Vell", "relation": "born_in", "object": "Tarn", "passage_id": "a"}]})]
    demos = build_demonstrations(records, KeywordRetriever(CORPUS), str, topk=2, max_turns=2,
                                 limit=1)
    assert [d.answer for d in demos] == ["diplomat"]


PLAIN = QARecord("u1", "Ada Vell was born in which city?", ["Tarn City", "Tarn"], {})


@pytest.mark.parametrize("max_turns", [1, 2])
def test_a_question_without_a_chain_searches_itself_and_answers_what_it_read(max_turns):
    """Your own data has no hop chains: one search with the question, the first golden answer
    the passages hold; the real loop replays it to the same text."""
    retriever = KeywordRetriever(CORPUS)
    generator = ScriptedGenerator({})
    [demo] = build_demonstrations([PLAIN], retriever, generator.chat_prompt, topk=1,
                                  max_turns=max_turns)
    assert retriever.calls == [[PLAIN.question]]
    assert policy_texts(demo) == [
        f"<think> I need to find: {PLAIN.question} </think>\n<search> {PLAIN.question} </search>",
        "<think> The passages say the answer is Tarn. </think>\n<answer> Tarn </answer>"]
    assert (demo.answer, demo.n_searches, demo.n_turns) == ("Tarn", 1, 2)  # "Tarn City": unread
    generator.rules = {"is married to Bo Rask": policy_texts(demo)[1]}  # once it has read
    generator.default = policy_texts(demo)[0]
    [replayed] = run_search_agent([PLAIN.question], generator, retriever, max_turns=max_turns,
                                  topk=1)
    assert replayed.text == demo.text and replayed.format_errors == 0


def test_a_question_whose_answer_was_not_retrieved_is_skipped():
    unread = QARecord("u2", "Who founded Tarn?", ["Mira Holt"], {})
    assert build_demonstrations([unread, PLAIN], KeywordRetriever(CORPUS), str, topk=2,
                                max_turns=2)[0].answer == "Tarn"
