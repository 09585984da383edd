"""ARR outcome reward, clarity, impact and the verifier's token advantages (eqs. 5–9)."""

from __future__ import annotations

import math

import pytest
import torch

from advrag.core.arr_rewards import (
    adversarial_outcome_reward,
    adversarial_outcome_rewards,
    bin_value,
    bin_values,
    clarity,
    gold_in_text,
    impact,
    process_advantage,
)


@pytest.mark.parametrize(
    ("diff", "binned"),
    [
        (0.3, 0.3),  # 0.3·10 = 3.0: the edge belongs to bucket 3
        (0.7 - 0.4, 0.3),  # 0.29999999999999993, ·10 = 2.999999999999999: still bucket 3
        (0.29, 0.2),  # floor(2.9) = 2
        (0.099, 0.0),  # under one bucket earns nothing
        (0.1, 0.1),  # exactly one bucket
        (1.0, 1.0),
        (0.0, 0.0),
        (-0.25, -0.2),  # negative side mirrors the positive one
        (-0.05, 0.0),
    ],
)
def test_bin_value_at_bucket_edges(diff, binned):
    assert bin_value(diff, 10) == binned


def test_bin_value_gaps_between_grid_f1s_land_on_their_bucket():
    # every F1 pair on the 0.1 grid: a − b carries float error, yet bin is exactly (i − j)/10
    for i in range(11):
        for j in range(i + 1):
            assert bin_value(i / 10 - j / 10, 10) == (i - j) / 10, (i, j)


def test_bin_value_other_bucket_counts():
    assert bin_value(0.49, 2) == 0.0  # floor(0.98) = 0
    assert bin_value(0.5, 2) == 0.5
    assert bin_value(0.99, 1) == 0.0  # one bucket: only a full 1.0 gap counts
    with pytest.raises(ValueError):
        bin_value(0.5, 0)


def test_bin_values_matches_scalar_and_survives_float32():
    diffs = [i / 100 for i in range(-100, 101)]
    batched = bin_values(torch.tensor(diffs, dtype=torch.float64), 10)
    assert batched.tolist() == [bin_value(d, 10) for d in diffs]
    # float32 F1s: 0.7f − 0.4f = 0.29999998, still bucket 3
    f32 = bin_values(torch.tensor([0.7]) - torch.tensor([0.4]), 10)
    assert f32.dtype == torch.float32 and f32.item() == pytest.approx(0.3)


def test_outcome_reward_bonus_for_the_winner_only():
    # verifier 0.9 vs reasoner 0.5: 0.9 + 0.5·bin(0.4) = 0.9 + 0.5·0.4 = 1.1
    assert adversarial_outcome_reward(0.9, 0.5, lam=0.5, n_buckets=10) == pytest.approx(1.1)
    # reasoner 0.5 vs verifier 0.9: bin(−0.4) → max(·, 0) = 0, reward = own F1 0.5
    assert adversarial_outcome_reward(0.5, 0.9, lam=0.5, n_buckets=10) == 0.5
    # a 0.05 win is under one bucket: 0.55 + 0.5·0 = 0.55
    assert adversarial_outcome_reward(0.55, 0.5, lam=0.5, n_buckets=10) == 0.55
    # 1.0 vs 0.0 with n=4, λ=0.2: 1.0 + 0.2·1.0 = 1.2
    assert adversarial_outcome_reward(1.0, 0.0, lam=0.2, n_buckets=4) == pytest.approx(1.2)


def test_outcome_rewards_batched_matches_scalar():
    f1_self = torch.tensor([0.9, 0.5, 0.55, 1.0, 0.0], dtype=torch.float64)
    f1_other = torch.tensor([0.5, 0.9, 0.5, 0.0, 0.0], dtype=torch.float64)
    rewards = adversarial_outcome_rewards(f1_self, f1_other, lam=0.5, n_buckets=10)
    expected = [
        adversarial_outcome_reward(a, b, lam=0.5, n_buckets=10)
        for a, b in zip(f1_self.tolist(), f1_other.tolist())
    ]
    assert rewards.tolist() == pytest.approx(expected)
    assert rewards.tolist() == pytest.approx([1.1, 0.5, 0.55, 1.5, 0.0])  # 1.0 + 0.5·1.0


def test_clarity_sign_rules():
    h = 0.7
    assert clarity(h, gold_in_docs=True, gold_in_action=True) == pytest.approx(math.exp(-0.7))
    assert clarity(h, gold_in_docs=True, gold_in_action=False) == pytest.approx(-math.exp(-0.7))
    assert clarity(h, gold_in_docs=False, gold_in_action=True) == 0.0
    assert clarity(h, gold_in_docs=False, gold_in_action=False) == 0.0
    assert clarity(0.0, True, True) == 1.0  # exp(0): a certain, faithful critique


def test_gold_in_text_whole_tokens_and_docs():
    assert gold_in_text(["Paris"], "The capital is PARIS, France.")
    assert not gold_in_text("cat", "a category error")  # not a whole token
    assert gold_in_text(["Lyon", "1990"], ["Born in Nice.", "It was 1990."])
    assert not gold_in_text(["new york"], ["in new", "york city"])  # no match across documents
    assert not gold_in_text([""], "")  # an empty gold is never contained


def test_impact_single_sequence_uses_last_three_turns():
    assert impact([0.5, 2.0, 1.5, 1.0], delta=0.1) == 1.0  # tail 2.0, 1.5, 1.0 is D
    assert impact([1.0, 2.0, 1.0], delta=0.1) == 0.8  # ID
    assert impact([1.0], delta=0.1) == 0.6  # F
    assert impact([], delta=0.1) == 0.6  # no turns: F
    assert impact(torch.tensor([1.0, 2.0, 3.0]), delta=0.1) == 0.2  # I


def test_impact_averages_over_monitored_action_types():
    think = [2.0, 1.0, 0.5]  # D → 1.0
    search = [1.0, 0.5, 1.0]  # DI → 0.4
    assert impact([think, search], delta=0.1) == pytest.approx(0.7)  # (1.0 + 0.4)/2
    assert impact(torch.tensor([think, search]), delta=0.1) == pytest.approx(0.7)
    assert impact([think], delta=0.1, scores={"D": 0.3}) == 0.3  # custom table


def test_process_advantage_is_the_product():
    # 0.5 · (−0.8) · 0.6 = −0.24
    assert process_advantage(0.5, -0.8, 0.6) == pytest.approx(-0.24)
    assert process_advantage(0.0, 1.0, 1.0) == 0.0  # wrong final answer: no process credit
