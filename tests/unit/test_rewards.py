"""Single-agent outcome reward."""

from __future__ import annotations

import pytest

from advrag.core.rewards import answer_reward, ur2_reward


def test_exact_answer_without_format_errors_gets_one():
    assert answer_reward("The Paris", ["Paris"]) == 1.0


def test_missing_answer_gets_zero_minus_penalty():
    assert answer_reward(None, ["Paris"], format_errors=1) == pytest.approx(-0.2)
    assert answer_reward(None, ["Paris"]) == 0.0


def test_f1_partial_credit_and_penalty():
    # pred tokens [paris, france] vs gold [paris]: P = 1/2, R = 1, F1 = 2/3; minus 0.1
    assert answer_reward("Paris, France", "Paris", metric="f1", format_errors=3,
                         format_penalty=0.1) == pytest.approx(2 / 3 - 0.1)


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match="bleu"):
        answer_reward("x", "x", metric="bleu")


@pytest.mark.parametrize(("violations", "queries", "faults", "want"), [
    (0, 0, 0, 1.0),        # +1 clean, no search
    (0, 1, 0, 4.0),        # +1 + 3
    (0, 2, 0, 5.0),        # +1 + 4
    (0, 5, 1, 4.5),        # +1 + 4 − 0.5
    (2, 1, 0, 1.0),        # −1·2 + 3
    (3, 0, 2, -4.0),       # −3 + 0 − 1
])
def test_ur2_stage_one_pays_for_format_and_searching_not_answers(violations, queries, faults, want):
    for correct in (True, False):
        assert ur2_reward(1, format_violations=violations, valid_queries=queries,
                          fallback_faults=faults, correct=correct) == want


@pytest.mark.parametrize(("correct", "violations", "faults", "want"), [
    (True, 0, 0, 3.0),     # +2 + 1
    (True, 1, 0, 2.0),     # +2 + 0
    (False, 0, 0, 1.0),    # 0 + 1
    (False, 4, 3, -1.5),   # 0 + 0 − 1.5
    (True, 0, 1, 2.5),     # +2 + 1 − 0.5
])
def test_ur2_stage_two_pays_for_correct_answers(correct, violations, faults, want):
    for queries in (0, 1, 3):
        assert ur2_reward(2, format_violations=violations, valid_queries=queries,
                          fallback_faults=faults, correct=correct) == want


def test_ur2_reward_weights_are_keywords_and_bad_input_is_refused():
    # App. C.5's weaker Qwen-3B variant: +5 / +7 for searching
    assert ur2_reward(1, format_violations=0, valid_queries=2, fallback_faults=0, correct=False,
                      one_query=5.0, two_queries=7.0) == 8.0
    with pytest.raises(ValueError, match="stages 1 and 2"):
        ur2_reward(3, format_violations=0, valid_queries=0, fallback_faults=0, correct=True)
    with pytest.raises(ValueError, match="counts"):
        ur2_reward(1, format_violations=-1, valid_queries=0, fallback_faults=0, correct=True)
