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


def test_the_interval_is_the_95_percent_percentile_bootstrap_worked_by_hand():
    """Nine ties and one win on ten questions: a resampled mean is k/10 with k ~ Binomial(10,
    0.1): P(k = 0) = 0.349, P(k <= 2) = 0.930, P(k <= 3) = 0.987. So the 2.5 % quantile is 0
    and the 97.5 % quantile 0.3; an 80 % interval would end at 0.2 (P(k <= 1) = 0.736)."""
    ids = [f"q{i}" for i in range(10)]
    champion = dict.fromkeys(ids, 0.0)
    candidate = champion | {"q0": 1.0}
    decision = decide(candidate, champion, benchmark_finished=True, gate_passed=True)
    assert (decision.diff, decision.lo, decision.hi) == (0.1, 0.0, 0.3)
    assert decision.alias == CHALLENGER  # lo = 0 is not above the margin 0
    assert decision.reason == ("not clearly better: EM diff +0.100, 95% CI [+0.000, +0.300], "
                               "needs lower bound > 0.0")


def test_a_lower_bound_equal_to_the_margin_does_not_promote():
    """Every question won by 0.25: every resampled mean is 0.25, so the interval is exactly
    [0.25, 0.25]; the gate asks for a lower bound above the margin."""
    ids = [f"q{i}" for i in range(8)]
    champion, candidate = dict.fromkeys(ids, 0.5), dict.fromkeys(ids, 0.75)
    at = decide(candidate, champion, benchmark_finished=True, gate_passed=True, min_margin=0.25)
    assert (at.lo, at.hi, at.alias) == (0.25, 0.25, CHALLENGER)
    below = decide(candidate, champion, benchmark_finished=True, gate_passed=True,
                   min_margin=0.2499)
    assert below.alias == CHAMPION
