"""GAR rewards (§3, λ defaults from §4.1): hand-computed values, edge conventions, validation."""

from __future__ import annotations

import math

import pytest

from advrag.core.gar_rewards import (
    alignment_reward,
    discriminator_reward,
    discriminator_total,
    reasoner_reward,
    slice_score,
)


def test_reasoner_reward_hand_computed():
    # 1·1 + 1·mean(1, 0, 1, 1) = 1 + 0.75
    assert reasoner_reward(1.0, [1, 0, 1, 1]) == pytest.approx(1.75)
    # 2·0 + 0.5·mean(0.5, 1.0) = 0.375
    assert reasoner_reward(0.0, [0.5, 1.0], lam1=2.0, lam2=0.5) == pytest.approx(0.375)
    # no slices: the slice term is 0, so only 1·R_m remains
    assert reasoner_reward(1.0, []) == 1.0
    assert reasoner_reward(0.0, []) == 0.0


def test_discriminator_reward_hand_computed():
    # ln 0.5 + ln(1 − 0.5) = 2·ln 0.5 = −1.3862943611198906
    assert discriminator_reward([0.5], [0.5]) == pytest.approx(-1.3862943611198906)
    # (ln 0.9 + ln 0.6)/2 + ln(1 − 0.2) = (−0.1053605 − 0.5108256)/2 − 0.2231436 = −0.5312366
    assert discriminator_reward([0.9, 0.6], [0.2]) == pytest.approx(-0.5312366, abs=1e-7)
    # a perfect discriminator: ln(1 − 1e-6) twice ≈ −2e-6, the clamp keeps it off 0 exactly
    assert discriminator_reward([1.0], [0.0]) == pytest.approx(2 * math.log(1 - 1e-6))


def test_discriminator_reward_clamps_instead_of_minus_infinity():
    # fully wrong: ln(1e-6) + ln(1 − (1 − 1e-6)) = 2·ln 1e-6 = −27.631021115928547
    assert discriminator_reward([0.0], [1.0]) == pytest.approx(-27.631021115928547)
    # a larger eps bounds the penalty harder: 2·ln 0.01 = −9.210340371976182
    assert discriminator_reward([0.0], [1.0], eps=0.01) == pytest.approx(-9.210340371976182)


def test_discriminator_reward_empty_side_contributes_zero():
    assert discriminator_reward([], [0.5]) == pytest.approx(math.log(0.5))
    assert discriminator_reward([0.5], []) == pytest.approx(math.log(0.5))
    assert discriminator_reward([], []) == 0.0


def test_alignment_reward_hand_computed():
    # correct answer: agreement is r_i itself → (1 + 0 + 1)/3
    assert alignment_reward([1, 0, 1], correct=True) == pytest.approx(2 / 3)
    # wrong answer: agreement is 1 − r_i → (0 + 1 + 0)/3
    assert alignment_reward([1, 0, 1], correct=False) == pytest.approx(1 / 3)
    # soft scores: (0.8 + 0.3)/2 = 0.55 and ((1 − 0.8) + (1 − 0.3))/2 = 0.45
    assert alignment_reward([0.8, 0.3], correct=True) == pytest.approx(0.55)
    assert alignment_reward([0.8, 0.3], correct=False) == pytest.approx(0.45)
    assert alignment_reward([], correct=True) == 0.0


@pytest.mark.parametrize("scores", [[1.0], [0.0, 1.0], [0.2, 0.7, 0.9]])
def test_alignment_for_right_and_wrong_answers_sums_to_one(scores):
    assert alignment_reward(scores, True) + alignment_reward(scores, False) == pytest.approx(1.0)


def test_discriminator_total_uses_paper_weights():
    # 1·(−1.386294) + 0.5·0.5 = −1.136294
    assert discriminator_total(-1.386294, 0.5) == pytest.approx(-1.136294)
    # 2·1 + 0·1 = 2
    assert discriminator_total(1.0, 1.0, lam3=2.0, lam4=0.0) == pytest.approx(2.0)


@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, float("inf")])
def test_out_of_range_or_nan_probabilities_raise(bad):
    with pytest.raises(ValueError, match="not a probability"):
        discriminator_reward([0.5, bad], [0.5])
    with pytest.raises(ValueError, match=r"p_gen\[0\]"):
        discriminator_reward([0.5], [bad])
    with pytest.raises(ValueError, match="slice_scores"):
        alignment_reward([bad], correct=True)
    with pytest.raises(ValueError, match="slice_scores"):
        reasoner_reward(1.0, [bad])
    with pytest.raises(ValueError, match="exact_match"):
        reasoner_reward(bad, [1.0])


@pytest.mark.parametrize("eps", [0.0, 0.5, -1e-6, float("nan")])
def test_invalid_eps_raises(eps):
    with pytest.raises(ValueError, match="eps"):
        discriminator_reward([0.5], [0.5], eps=eps)


def test_slice_score_is_the_verdict_by_default_and_p_yes_on_request():
    # the paper's r_s is the 0/1 verdict: P(yes) does not move it
    assert (slice_score(True, 0.3), slice_score(False, 0.9)) == (1.0, 0.0)
    assert slice_score(None, 0.9) is None  # no verdict: no score (its slice earns 0)
    assert slice_score(False, 0.25, "p_yes") == 0.25
    assert slice_score(True, None, "p_yes") is None  # no P(yes) to read: no score


def test_slice_score_rejects_an_unknown_mode_and_a_bad_probability():
    with pytest.raises(ValueError, match="slice score mode"):
        slice_score(True, 0.5, "logit")
    with pytest.raises(ValueError, match="p_yes"):
        slice_score(True, 1.5, "p_yes")
