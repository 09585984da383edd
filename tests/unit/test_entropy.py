"""Entropy-trend patterns, their scores and mean action entropy (ARR §3.2)."""

from __future__ import annotations

import math

import pytest
import torch

from advrag.core.entropy import (
    PATTERN_SCORES,
    entropy_pattern,
    mean_token_entropy,
    pattern_score,
)


@pytest.mark.parametrize(
    ("values", "pattern"),
    [
        ([3.0, 2.0, 1.0], "D"),  # −1, −1
        ([3.0, 3.2, 1.0], "D"),  # +0.2 flat (≤ 0.5), −2.2: no increase, one decrease
        ([3.0, 1.0, 1.3], "D"),  # −2, +0.3 flat
        ([1.0, 3.0, 2.0], "ID"),  # +2, −1
        ([2.0, 2.2, 1.9], "F"),  # +0.2, −0.3: both within δ
        ([3.0, 1.0, 2.0], "DI"),  # −2, +1
        ([1.0, 2.0, 3.0], "I"),  # +1, +1
        ([1.0, 1.0, 3.0], "I"),  # 0 flat, +2
    ],
)
def test_every_pattern_from_three_values(values, pattern):
    assert entropy_pattern(values, delta=0.5) == pattern


@pytest.mark.parametrize(
    "values",
    [
        [1.0, 1.5, 1.0],  # +0.5, −0.5: exactly ±δ (representable) is flat
        [1.0, 0.5, 1.0],  # −0.5, +0.5
        [1.0, 1.5, 2.0],  # +0.5, +0.5
    ],
)
def test_change_of_exactly_delta_is_flat(values):
    assert entropy_pattern(values, delta=0.5) == "F"


def test_decimal_delta_edge_is_flat_despite_float_error():
    assert 1.1 - 1.0 > 0.1  # 0.10000000000000009: the tolerance is what makes this flat
    assert entropy_pattern([1.0, 1.1, 1.0], delta=0.1) == "F"
    assert entropy_pattern([1.0, 1.1000001, 1.0], delta=0.1) == "ID"  # just past δ


def test_zero_delta_any_change_counts():
    assert entropy_pattern([1.0, 1.0 + 1e-6, 1.0], delta=0.0) == "ID"
    assert entropy_pattern([1.0, 1.0, 1.0], delta=0.0) == "F"


def test_only_last_three_values_count():
    # the early rise 0 → 5 is ignored; the tail 5, 4, 3 is D
    assert entropy_pattern([0.0, 5.0, 4.0, 3.0], delta=0.5) == "D"
    # tail 1, 3, 2 is ID whatever came before
    assert entropy_pattern([9.0, 8.0, 7.0, 1.0, 3.0, 2.0], delta=0.5) == "ID"


@pytest.mark.parametrize(
    ("values", "pattern"),
    [
        ([], "F"),
        ([2.0], "F"),
        ([2.0, 1.0], "D"),  # one step −1
        ([1.0, 2.0], "I"),  # one step +1
        ([1.0, 1.5], "F"),  # one step of exactly δ
    ],
)
def test_fewer_than_three_values(values, pattern):
    assert entropy_pattern(values, delta=0.5) == pattern


def test_accepts_tensor_values():
    assert entropy_pattern(torch.tensor([3.0, 1.0, 2.0]), delta=0.5) == "DI"


def test_negative_delta_rejected():
    with pytest.raises(ValueError):
        entropy_pattern([1.0, 2.0], delta=-0.1)


def test_pattern_scores_are_the_papers_table():
    assert dict(PATTERN_SCORES) == {"D": 1.0, "ID": 0.8, "F": 0.6, "DI": 0.4, "I": 0.2}
    assert [pattern_score(p) for p in ("D", "ID", "F", "DI", "I")] == [1.0, 0.8, 0.6, 0.4, 0.2]
    with pytest.raises(TypeError):
        PATTERN_SCORES["D"] = 0.0  # read-only


def test_pattern_score_custom_table_and_unknown_pattern():
    assert pattern_score("F", {"F": 0.5}) == 0.5
    with pytest.raises(ValueError):
        pattern_score("X")


def test_mean_token_entropy_hand_values():
    entropies = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, float("nan"), 0.5, 0.5]])
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    # row 0: (1+2+3)/3 = 2; row 1: 4/1 = 4, the NaN is masked out
    assert torch.equal(mean_token_entropy(entropies, mask), torch.tensor([2.0, 4.0]))


def test_mean_token_entropy_empty_action_is_nan_and_int_mask_ok():
    entropies = torch.tensor([0.7, 0.9])
    # no tokens: no mean (NaN, left out of trends), not 0.0
    assert math.isnan(mean_token_entropy(entropies, torch.tensor([0, 0])).item())
    assert math.isclose(
        mean_token_entropy(entropies, torch.tensor([1, 1])).item(), 0.8, rel_tol=1e-6
    )
