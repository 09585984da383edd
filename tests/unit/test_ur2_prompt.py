"""UR²'s search prompt and its reward share one query word limit; the boundary by hand."""

from __future__ import annotations

import pytest

from advrag.agents.prompts import ur2_search_prompt
from advrag.agents.types import Trajectory
from advrag.agents.ur2_scoring import QUERY_WORD_LIMIT, ur2_counts


def searched(*queries: str) -> Trajectory:
    trajectory = Trajectory(queries=list(queries))
    trajectory.n_searches = len(queries)
    return trajectory


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_the_paper_limit_is_under_twenty_words():
    assert QUERY_WORD_LIMIT == 20  # UR² App. D.2: "less than 20 words"


@pytest.mark.parametrize(("n_words", "violations", "valid"), [
    (1, 0, 1),     # the shortest query
    (19, 0, 1),    # under 20 words: valid
    (20, 1, 0),    # 20 words is not under 20: an overlength query
    (21, 1, 0),
    (0, 1, 0),     # an empty query
])
def test_the_word_limit_boundary(n_words, violations, valid):
    counts = ur2_counts(searched(words(n_words)))
    assert (counts.format_violations, counts.valid_queries) == (violations, valid)


def test_the_prompt_states_the_limit_the_reward_counts_and_the_budget():
    prompt = ur2_search_prompt("Who wrote Hamlet?", max_queries=4)
    assert f"under {QUERY_WORD_LIMIT} words" in prompt
    assert "at most 4 searches" in prompt
    assert "one fact per query" in prompt
    assert prompt.endswith("Question: Who wrote Hamlet?\n")
    for tag in ("<think>", "<search>", "<information>", "<answer>"):
        assert tag in prompt


def test_a_budget_of_one_reads_as_one_search_and_none_is_refused():
    assert "at most one search in all" in ur2_search_prompt("Q?", max_queries=1)
    with pytest.raises(ValueError, match="max_queries"):
        ur2_search_prompt("Q?", max_queries=0)
