"""Hand-worked cases and invariants for advrag.core.advantages."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from advrag.core.advantages import (
    grpo_advantages,
    informative_group_fraction,
    reinforce_pp_baseline_advantages,
    token_advantages,
)

EPS = 1e-6

# (group id, score) pairs: a few groups, scores on a coarse grid so groups can tie
_ROLLOUTS = st.lists(
    st.tuples(st.integers(0, 4), st.integers(-4, 4).map(lambda k: k / 2)), min_size=1, max_size=24
)


def test_grpo_one_group_hand_computed():
    # mean 0.5; unbiased std = sqrt((4 · 0.5²) / 3) = sqrt(1/3) = 0.57735
    # advantage = ±0.5 / (0.57735 + 1e-6) = ±0.86603
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), [0, 0, 0, 0])
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(adv, torch.tensor([a, -a, -a, a]))
    assert a == pytest.approx(0.866025, abs=1e-5)


def test_grpo_groups_of_different_sizes_interleaved():
    # group "a" = [2, 4, 6]: mean 4, unbiased std sqrt((4 + 0 + 4) / 2) = 2 → [-1, 0, 1]
    # group "b" = [1, 3]:    mean 2, unbiased std sqrt((1 + 1) / 1) = √2 → [-1/√2, 1/√2]
    # group 7 = [5]: a group of one → 0
    scores = torch.tensor([2.0, 1.0, 4.0, 5.0, 3.0, 6.0], dtype=torch.float64)
    adv = grpo_advantages(scores, ["a", "b", "a", 7, "b", "a"])
    b = 1 / (math.sqrt(2) + EPS)
    expected = [-2 / (2 + EPS), -b, 0.0, 0.0, b, 2 / (2 + EPS)]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("scale", ["group", "none"])
def test_grpo_equal_scores_and_lone_rollouts_get_exactly_zero(scale):
    adv = grpo_advantages(
        torch.tensor([0.7, 0.7, 0.7, 3.0, 0.0, 0.0]), [1, 1, 1, 2, 3, 3], scale=scale
    )
    # 0.7 · 3 / 3 need not round back to 0.7, so the first group is only near zero
    torch.testing.assert_close(adv[:3], torch.zeros(3), atol=1e-4, rtol=0)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]  # lone rollout; two equal integer-valued scores


def test_dr_grpo_only_subtracts_the_group_mean():
    # group 0 = [1, 0, 0, 1]: mean 0.5; group 1 = [2, 4, 6]: mean 4; group 2 = [9]: lone → 0
    adv = grpo_advantages(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 6.0, 9.0]),
        [0, 0, 0, 0, 1, 1, 1, 2],
        scale="none",
    )
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5, -2.0, 0.0, 2.0, 0.0]


def test_grpo_accepts_tensor_ids_and_integer_scores():
    by_list = grpo_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), [5, 5, 6, 6])
    by_tensor = grpo_advantages(torch.tensor([1, 0, 2, 2]), torch.tensor([5, 5, 6, 6]))
    torch.testing.assert_close(by_tensor, by_list)


def test_grpo_rejects_bad_inputs():
    with pytest.raises(ValueError, match="'group', 'none'"):
        grpo_advantages(torch.tensor([1.0, 0.0]), [0, 0], scale="batch")
    with pytest.raises(ValueError, match="2 group ids for 3 scores"):
        grpo_advantages(torch.tensor([1.0, 0.0, 1.0]), [0, 0])
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.ones(2, 2), [0, 0])


@settings(max_examples=60, deadline=None)
@given(_ROLLOUTS)
def test_grpo_sums_to_zero_per_group_and_matches_a_per_group_loop(rollouts):
    ids = [g for g, _ in rollouts]
    scores = torch.tensor([s for _, s in rollouts], dtype=torch.float64)
    for scale in ("group", "none"):
        adv = grpo_advantages(scores, ids, scale=scale)
        for g in set(ids):
            members = torch.tensor([i == g for i in ids])
            assert abs(adv[members].sum().item()) < 1e-9
            group = scores[members]
            if len(group) == 1:
                expected = torch.zeros(1, dtype=torch.float64)
            elif scale == "group":
                expected = (group - group.mean()) / (group.std() + EPS)
            else:
                expected = group - group.mean()
            torch.testing.assert_close(adv[members], expected)


def test_token_advantages_broadcasts_and_zeroes_masked_tokens():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    out = token_advantages(torch.tensor([2.0, -1.0]), mask)
    assert out.tolist() == [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]
    with pytest.raises(ValueError, match="does not match"):
        token_advantages(torch.tensor([2.0, -1.0, 0.0]), mask)


def test_reinforce_pp_hand_computed():
    # baselines: group "a" = [1, 0] → centred [0.5, -0.5]; group "b" = [3] is alone → baseline 0 → 3
    # unmasked tokens: [0.5, 0.5, -0.5, -0.5, 3]; mean = 3 / 5 = 0.6
    # squared deviations 0.01 + 0.01 + 1.21 + 1.21 + 5.76 = 8.2; unbiased var 8.2 / 4 = 2.05
    # std = sqrt(2.05) = 1.4317821 → rows: -0.1/std = -0.069843, -1.1/std = -0.768273, 2.4/std = 1.676235
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0]])
    adv = reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0, 3.0]), ["a", "a", "b"], mask)
    std = math.sqrt(2.05) + EPS
    x, y, z = -0.1 / std, -1.1 / std, 2.4 / std
    torch.testing.assert_close(adv, torch.tensor([[x, x, 0.0], [y, y, 0.0], [z, 0.0, 0.0]]))
    assert (x, y, z) == pytest.approx((-0.069843, -0.768273, 1.676235), abs=1e-5)


def test_reinforce_pp_invariants_on_random_batches():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        batch, seq = 12, 9
        scores = torch.rand(batch, generator=gen, dtype=torch.float64)
        ids = torch.randint(0, 4, (batch,), generator=gen).tolist()
        lengths = torch.randint(0, seq + 1, (batch,), generator=gen)
        lengths[0] = 2  # at least two unmasked tokens
        mask = torch.arange(seq)[None, :] < lengths[:, None]
        adv = reinforce_pp_baseline_advantages(scores, ids, mask)
        assert (adv[~mask] == 0).all()
        values = adv[mask]
        assert abs(values.mean().item()) < 1e-9
        assert values.std().item() == pytest.approx(1.0, abs=1e-5)
        # one value per sequence, and extra padded columns change nothing
        for row, n in zip(adv, lengths.tolist()):
            assert (row[:n] == row[0]).all()
        padded = torch.cat([mask, torch.zeros(batch, 4, dtype=torch.bool)], dim=1)
        torch.testing.assert_close(
            reinforce_pp_baseline_advantages(scores, ids, padded)[:, :seq], adv
        )


def test_reinforce_pp_degenerate_batches_are_zero_not_nan():
    mask = torch.tensor([[1, 1], [1, 0]])
    # every group ties: all centred scores are 0 → std 0 → advantages 0
    assert reinforce_pp_baseline_advantages(torch.tensor([1.0, 1.0]), [0, 0], mask).tolist() == [
        [0.0, 0.0],
        [0.0, 0.0],
    ]
    empty = torch.zeros(2, 2, dtype=torch.bool)
    assert reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0]), [0, 0], empty).tolist() == [
        [0.0, 0.0],
        [0.0, 0.0],
    ]


def test_informative_group_fraction_counts_groups_whose_rewards_differ():
    # groups a (−0.2, −0.2: no signal), b (0, 1), c (0.5 alone: no signal), d (1, 1, 0.3)
    scores = torch.tensor([-0.2, -0.2, 0.0, 1.0, 0.5, 1.0, 1.0, 0.3])
    ids = ["a", "a", "b", "b", "c", "d", "d", "d"]
    assert informative_group_fraction(scores, ids) == 2 / 4
    assert informative_group_fraction(scores, torch.tensor([0, 0, 1, 1, 2, 3, 3, 3])) == 0.5
    assert informative_group_fraction(torch.full((4,), -0.2), [0, 0, 1, 1]) == 0.0
    assert informative_group_fraction(torch.tensor([]), []) == 0.0
