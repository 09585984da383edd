"""Promotion gate decisions."""

from __future__ import annotations

from advrag.registry.promotion import CHALLENGER, CHAMPION, decide

IDS = [f"q{i}" for i in range(40)]


def em(correct: set[int]) -> dict[str, float]:
    return {q: float(i in correct) for i, q in enumerate(IDS)}


def test_failed_or_missing_benchmark_never_promotes():
    assert decide(em(set(range(40))), None, benchmark_finished=False, gate_passed=True).alias == CHALLENGER
    assert decide(None, None, benchmark_finished=True, gate_passed=True).alias == CHALLENGER
    assert decide({}, None, benchmark_finished=True, gate_passed=True).alias == CHALLENGER


def test_failed_gate_never_promotes():
    d = decide(em(set(range(40))), em(set()), benchmark_finished=True, gate_passed=False)
    assert d.alias == CHALLENGER and "gate" in d.reason


def test_first_candidate_becomes_champion():
    assert decide(em({1}), None, benchmark_finished=True, gate_passed=True).promote


def test_clear_win_promotes_with_the_interval_recorded():
    # candidate right on 30 of 40, champion on 10 (a subset): every paired diff is 0 or +1,
    # mean = 20/40 = 0.5; the bootstrap lower bound stays well above 0
    d = decide(em(set(range(30))), em(set(range(10))), benchmark_finished=True, gate_passed=True)
    assert d.alias == CHAMPION and d.diff == 0.5 and 0 < d.lo <= 0.5 <= d.hi


def test_a_one_question_edge_is_within_noise():
    # diff = 1/40 = 0.025 from a single question: the interval includes 0
    d = decide(em(set(range(11))), em(set(range(10))), benchmark_finished=True, gate_passed=True)
    assert d.alias == CHALLENGER and d.lo <= 0 and "not clearly better" in d.reason


def test_margin_threshold_is_respected():
    d = decide(em(set(range(30))), em(set(range(10))), benchmark_finished=True, gate_passed=True,
               min_margin=0.6)
    assert d.alias == CHALLENGER


def test_different_questions_are_not_comparable():
    champion = em(set(range(10)))
    champion.pop("q0")
    d = decide(em(set(range(30))), champion, benchmark_finished=True, gate_passed=True)
    assert d.alias == CHALLENGER and "different questions" in d.reason
