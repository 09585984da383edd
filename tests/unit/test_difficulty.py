"""UR²'s difficulty levels and 7:2:1 sampling, on hand-worked cases."""

from __future__ import annotations

from collections import Counter

import pytest

from advrag.curation.difficulty import (
    difficulty_level,
    largest_remainder,
    level_counts,
    sample_by_difficulty,
)


@pytest.mark.parametrize(("score", "level"), [
    (1.0, "easy"), (0.8, "easy"), (0.79, "medium"), (0.5, "medium"), (0.49, "hard"),
    (0.2, "hard"), (0.19, None), (0.0, None)])
def test_levels_follow_the_papers_boundaries(score, level):
    assert difficulty_level(score) == level


def test_thresholds_are_configurable_and_checked():
    assert difficulty_level(0.6, {"easy": 0.9, "medium": 0.7, "hard": 0.1}) == "hard"
    with pytest.raises(ValueError, match="fall from easy to hard"):
        difficulty_level(0.6, {"easy": 0.5, "medium": 0.7, "hard": 0.1})
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"in \[0, 1\]"):
            difficulty_level(bad)


def test_largest_remainder_hand_values():
    # 5 by 7:2:1 → exact 3.5, 1.0, 0.5 → floors 3, 1, 0; remainders tie .5/.5: the first key wins
    assert largest_remainder(5, {"hard": 7, "medium": 2, "easy": 1}) == {
        "hard": 4, "medium": 1, "easy": 0}
    # 10 by 7:2:1 is exact
    assert largest_remainder(10, {"hard": 7, "medium": 2, "easy": 1}) == {
        "hard": 7, "medium": 2, "easy": 1}


def test_a_short_level_gives_all_it_has_and_the_rest_follow_the_ratio():
    # hard has 2 of its 7: the 5 missing go to medium:easy = 2:1 → 3.33, 1.67 → 3+1, 1+1
    counts = level_counts({"hard": 2, "medium": 10, "easy": 10}, 10,
                          {"hard": 7, "medium": 2, "easy": 1})
    assert counts == {"hard": 2, "medium": 5, "easy": 3}
    # asking for more than there is takes everything
    assert level_counts({"hard": 2, "medium": 1, "easy": 0}, 10,
                        {"hard": 7, "medium": 2, "easy": 1}) == {"hard": 2, "medium": 1, "easy": 0}


def test_sample_has_the_ratio_no_duplicates_and_no_filtered_item():
    levels = ["hard"] * 30 + ["medium"] * 30 + ["easy"] * 30 + [None] * 30
    picked = sample_by_difficulty(levels, 20, seed=3)
    assert len(picked) == len(set(picked)) == 20
    assert Counter(levels[i] for i in picked) == {"hard": 14, "medium": 4, "easy": 2}
    assert picked != sample_by_difficulty(levels, 20, seed=4)
    assert picked == sample_by_difficulty(levels, 20, seed=3)
    assert sorted(sample_by_difficulty(levels, 500)) == list(range(90))  # all unfiltered
    assert sample_by_difficulty([None, None], 5) == []


def test_unknown_levels_and_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="no ratio"):
        sample_by_difficulty(["hard", "trivial"], 2)
    with pytest.raises(ValueError, match="n must be"):
        sample_by_difficulty(["hard"], -1)
