"""Task mixing's episodes: search loop or one direct answer per question, in question order."""

from __future__ import annotations

import pytest
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.mixed import run_mixed_agent
from advrag.agents.prompts import direct_reasoning_prompt, ur2_search_prompt

HAMLET = "Who wrote Hamlet?"
YEARS = "X was founded in 1800 and Y in 1867. How many years apart were they founded?"


def test_each_question_gets_its_own_episode_shape_and_keeps_its_place():
    gen = ScriptedGenerator({
        "Doc 1(Title: Hamlet)": "<think>Found.</think><answer>William Shakespeare</answer>",
        f"Question: {HAMLET}": "<think>Look.</think><search>Hamlet author</search>",
        YEARS: "<think>1867 - 1800 = 67.</think><answer>67</answer>",
    })
    retriever = KeywordRetriever(CORPUS)
    years, hamlet, years_again = run_mixed_agent(
        [YEARS, HAMLET, YEARS], [False, True, False], gen, retriever, max_turns=2, topk=2,
        max_new_tokens=32)
    # the searching item gets UR²'s prompt, whose query budget is the loop's 2 turns
    assert hamlet.segments[0].text == gen.chat_prompt(ur2_search_prompt(HAMLET, 2))
    assert (hamlet.answer, hamlet.n_searches, hamlet.queries) == ("William Shakespeare", 1,
                                                                   ["Hamlet author"])
    for direct in (years, years_again):
        assert direct.segments[0].text == gen.chat_prompt(direct_reasoning_prompt(YEARS))
        assert (direct.answer, direct.n_searches, direct.format_errors) == ("67", 0, 0)
    assert retriever.calls == [["Hamlet author"]]  # the direct items never search


def test_flags_must_match_the_questions():
    with pytest.raises(ValueError, match="2 retrieval flags for 1 questions"):
        run_mixed_agent([HAMLET], [True, False], ScriptedGenerator({}), KeywordRetriever(CORPUS),
                        max_new_tokens=8, max_turns=2)
