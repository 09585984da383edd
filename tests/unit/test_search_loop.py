"""Batched Search-R1 loop and the baselines, against scripted doubles."""

from __future__ import annotations

import json

from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.baselines import answer_cot, answer_naive_rag, extract_answer
from advrag.agents.prompts import (
    FALLBACK_HINT,
    FORCE_ANSWER_HINT,
    INVALID_ACTION_HINT,
    information_block,
    search_r1_prompt,
)
from advrag.agents.search_loop import STOP, run_search_agent
from advrag.common.types import format_docs
from advrag.retrieval.summary import SUMMARY_FALLBACK_MESSAGE, LLMSummariser

HAMLET, FRANCE, PYTHON = (
    "Who wrote Hamlet?",
    "What is the capital of France?",
    "Who created Python?",
)


def _sources(traj):
    return [s.source for s in traj.segments]


def test_mixed_batch_search_then_answer():
    gen = ScriptedGenerator(
        {
            "Doc 1(Title: Hamlet)": "<think>Found it.</think><answer>William Shakespeare</answer>",
            f"Question: {HAMLET}": "<think>Look it up.</think><search>Hamlet author</search>",
            f"Question: {FRANCE}": "<think>I know this.</think><answer>Paris</answer>",
        }
    )
    retriever = KeywordRetriever(CORPUS)
    hamlet, france = run_search_agent([HAMLET, FRANCE], gen, retriever, topk=2)

    assert gen.batch_sizes == [2, 1]  # both advance on turn 1, only the searcher on turn 2
    assert gen.stops == [STOP, STOP]
    assert retriever.calls == [["Hamlet author"]]

    assert _sources(hamlet) == ["prompt", "policy", "env", "policy"]
    assert hamlet.segments[0].text == gen.chat_prompt(search_r1_prompt(HAMLET))
    assert hamlet.segments[2].text == information_block(format_docs(CORPUS[:2]))
    assert (hamlet.answer, hamlet.n_searches, hamlet.n_turns) == ("William Shakespeare", 1, 2)
    assert hamlet.retrieved_ids == ["p1", "p2"]  # "hamlet" overlaps p1 only; then corpus order
    assert hamlet.format_errors == 0
    assert gen.calls[1] == [hamlet.text[: -len(hamlet.segments[-1].text)]]

    assert _sources(france) == ["prompt", "policy"]
    assert (france.answer, france.n_searches, france.n_turns) == ("Paris", 0, 1)
    assert france.retrieved_ids == []


def test_one_search_call_per_turn_for_all_searchers():
    gen = ScriptedGenerator(
        {
            "<information>Doc 1": "<answer>done</answer>",
            "Question: ": "<think>t</think><search>query</search> trailing text is cut by stop",
        }
    )
    retriever = KeywordRetriever(CORPUS)
    trajs = run_search_agent([HAMLET, FRANCE, PYTHON], gen, retriever)
    assert gen.batch_sizes == [3, 3]
    assert retriever.calls == [["query", "query", "query"]]
    assert all(t.answer == "done" and t.n_searches == 1 and t.format_errors == 0 for t in trajs)
    assert all(t.segments[1].text.endswith("</search>") for t in trajs)


def test_max_turns_forces_a_final_answer():
    gen = ScriptedGenerator(
        {
            "No more searches are allowed": "<think>Best guess.</think><answer>forced</answer>",
            "Question: ": "<search>more</search>",
        }
    )
    retriever = KeywordRetriever(CORPUS)
    (traj,) = run_search_agent([HAMLET], gen, retriever, max_turns=2)
    assert gen.batch_sizes == [1, 1, 1]
    assert gen.stops[-1] == ("</answer>",)
    assert len(retriever.calls) == 2
    assert _sources(traj) == ["prompt", "policy", "env", "policy", "env", "env", "policy"]
    assert traj.segments[5].text == FORCE_ANSWER_HINT
    assert (traj.answer, traj.n_searches, traj.n_turns, traj.format_errors) == ("forced", 2, 3, 0)


def test_forced_answer_missing_stays_none():
    gen = ScriptedGenerator({"Question: ": "<search>more</search>"})
    (traj,) = run_search_agent([HAMLET], gen, KeywordRetriever(CORPUS), max_turns=1)
    assert traj.answer is None
    assert traj.format_errors == 1  # the forced turn had no answer
    assert traj.n_turns == 2


def test_malformed_output_gets_a_hint_and_continues():
    gen = ScriptedGenerator(
        {
            "not a valid action": "<think>Right.</think><answer>42</answer>",
            "Question: ": "<think>hmm, let me",
        }
    )
    retriever = KeywordRetriever(CORPUS)
    (traj,) = run_search_agent([HAMLET], gen, retriever)
    assert retriever.calls == []
    assert _sources(traj) == ["prompt", "policy", "env", "policy"]
    assert traj.segments[2].text == INVALID_ACTION_HINT
    assert (traj.answer, traj.format_errors, traj.n_turns) == ("42", 1, 2)


def test_non_canonical_action_is_acted_on_and_counted():
    gen = ScriptedGenerator(
        {"<information>Doc 1": "<answer>x</answer>", "Question: ": "<Search>hamlet</Search>"}
    )
    retriever = KeywordRetriever(CORPUS)
    (traj,) = run_search_agent([HAMLET], gen, retriever)
    assert retriever.calls == [["hamlet"]]
    assert (traj.answer, traj.format_errors) == ("x", 1)


def test_empty_question_list():
    gen = ScriptedGenerator({})
    assert run_search_agent([], gen, KeywordRetriever(CORPUS)) == []
    assert gen.calls == []


def test_extract_answer_rule():
    assert extract_answer("<answer>A</answer><answer>B</answer>") == "B"
    assert extract_answer("<think>x</think><answer> Paris") == "Paris"
    assert extract_answer("no tags") is None


def test_cot_baseline_batched():
    gen = ScriptedGenerator({"Question: ": "<think>t</think><answer>A</answer>", "never": ""})
    preds, trajs = answer_cot([HAMLET, FRANCE], gen, max_new_tokens=32)
    assert preds == ["A", "A"]
    assert gen.batch_sizes == [2]
    assert [_sources(t) for t in trajs] == [["prompt", "policy"]] * 2


def test_naive_rag_baseline_batched():
    gen = ScriptedGenerator({"Doc 1(Title: Paris)": "<answer>Paris</answer>"}, default="no answer")
    retriever = KeywordRetriever(CORPUS)
    preds, trajs = answer_naive_rag([FRANCE, HAMLET], gen, retriever, k=2)
    assert retriever.calls == [[FRANCE, HAMLET]]
    assert gen.batch_sizes == [2]
    assert preds == ["Paris", None]
    assert trajs[0].retrieved_ids[0] == "p2"
    assert "Doc 1(Title: Paris)" in trajs[0].segments[0].text
    assert [t.format_errors for t in trajs] == [0, 1]


# ---------------------------------------------------------------- UR² summarised retrieval

MATH = "What is 17 times 23?"
SUMMARY_OUT = "**Final Information**\nHamlet was written by William Shakespeare."


def _fallback_summariser() -> LLMSummariser:
    return LLMSummariser(ScriptedGenerator({"Query: compute": SUMMARY_FALLBACK_MESSAGE}), "fake")


def test_fallback_shows_the_message_then_the_hint_and_is_counted():
    policy = ScriptedGenerator(
        {
            "It seems that this query exceeds": "<answer>391</answer>",
            f"Question: {MATH}": "<search>compute 17 times 23</search>",
        }
    )
    (traj,) = run_search_agent(
        [MATH], policy, KeywordRetriever(CORPUS), topk=2, summariser=_fallback_summariser()
    )
    assert _sources(traj) == ["prompt", "policy", "env", "env", "policy"]
    assert traj.segments[2].text == information_block(SUMMARY_FALLBACK_MESSAGE)
    assert traj.segments[3].text == FALLBACK_HINT
    assert f"</information>\n\n{FALLBACK_HINT}<answer>391</answer>" in traj.text
    assert (traj.answer, traj.fallbacks, traj.n_searches) == ("391", 1, 1)
    assert traj.queries == ["compute 17 times 23"]
    assert traj.retrieved_ids == ["p1", "p2"]  # no word overlaps: corpus order


def test_fallback_without_hint_is_still_counted():
    policy = ScriptedGenerator(
        {
            "<information>This query requires": "<answer>391</answer>",
            f"Question: {MATH}": "<search>compute 17 times 23</search>",
        }
    )
    (traj,) = run_search_agent([MATH], policy, KeywordRetriever(CORPUS),
                               summariser=_fallback_summariser(), fallback_hint=False)
    assert _sources(traj) == ["prompt", "policy", "env", "policy"]
    assert FALLBACK_HINT not in traj.text
    assert traj.fallbacks == 1


def test_summary_and_raw_documents_share_one_summariser_call():
    policy = ScriptedGenerator(
        {
            "<information>Hamlet was written": "<answer>William Shakespeare</answer>",
            "<information>Doc 1": "<answer>Paris</answer>",
            f"Question: {HAMLET}": "<search>Hamlet author</search>",
            f"Question: {FRANCE}": "<search>capital of France</search>",
        }
    )
    summariser_model = ScriptedGenerator({"Query: Hamlet author": SUMMARY_OUT}, default="")
    summariser = LLMSummariser(summariser_model, "fake")
    hamlet, france = run_search_agent(
        [HAMLET, FRANCE], policy, KeywordRetriever(CORPUS), topk=2, summariser=summariser
    )
    assert summariser_model.batch_sizes == [2]
    assert hamlet.segments[2].text == information_block("Hamlet was written by William Shakespeare.")
    # the empty summary is malformed: the raw top-2 ("capital", "of", "france" → p2 first)
    assert france.segments[2].text == information_block(format_docs([CORPUS[1], CORPUS[0]]))
    assert (hamlet.answer, france.answer) == ("William Shakespeare", "Paris")
    assert (hamlet.fallbacks, france.fallbacks) == (0, 0)
    assert (summariser.stats.summaries, summariser.stats.raw_fallbacks) == (1, 1)


def test_a_trajectory_reads_back_from_json_equal():
    from advrag.agents.types import ProbeOrigin, Trajectory

    t = Trajectory(answer="Paris", n_searches=1, queries=["capital of France"],
                   search_ids=[("p1", "p2")], retrieved_ids=["p1", "p2"],
                   probe=ProbeOrigin(origin=3, segment=2, prompt=7))
    t.add("<|user|>Q", "prompt")
    t.add("<search> capital of France </search>", "policy")
    t.add("<information>Paris</information>", "env")
    back = Trajectory.from_json(json.loads(json.dumps(t.to_json())))
    assert back == t
