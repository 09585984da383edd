"""Hand-worked cases and invariants for advrag.core.metrics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from advrag.core.metrics import (
    bootstrap_ci,
    clustered_auroc_ci,
    exact_match,
    f1_score,
    normalize_answer,
    paired_bootstrap_diff_ci,
    pass_at_k,
    replicate_paired_diff_ci,
    retrieval_recall,
    sub_exact_match,
)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("The  Cat, sat!", "cat sat"),  # lower, punctuation gone, article gone, spaces collapsed
        ("an apple a day", "apple day"),
        ("theatre", "theatre"),  # "the" only as a whole word
        ("A-B", "ab"),  # punctuation is deleted, not replaced by a space (SQuAD)
        ("  \t\n", ""),
        (None, ""),
        ("Ünïcode Café", "ünïcode café"),
    ],
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_normalises_and_takes_any_gold():
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert exact_match("Paris", ["London", "paris!"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("Paris", []) == 0.0


def test_empty_string_conventions():
    # empty prediction vs non-empty gold: EM 0, F1 0
    assert exact_match("", "Paris") == 0.0
    assert f1_score(None, "Paris") == 0.0
    # gold normalising to "" vs empty prediction: EM 1, F1 1 (SQuAD)
    assert exact_match(None, "the") == 1.0
    assert f1_score("", "a") == 1.0
    # non-empty prediction vs gold normalising to "": 0
    assert exact_match("Paris", "the") == 0.0
    assert f1_score("Paris", "") == 0.0
    assert sub_exact_match("Paris", "") == 0.0
    assert sub_exact_match("", "") == 1.0
    assert f1_score("Paris", []) == 0.0


def test_f1_hand_case():
    # pred "the cat sat" -> [cat, sat]; gold "a cat sat down" -> [cat, sat, down]
    # common = 2; P = 2/2 = 1; R = 2/3; F1 = 2*1*(2/3)/(1+2/3) = (4/3)/(5/3) = 0.8
    assert f1_score("the cat sat", "a cat sat down") == pytest.approx(0.8)


def test_f1_counts_repeated_tokens_once_per_match():
    # pred "a b b b" -> normalised [b, b, b] (article "a" dropped); gold [b, c]
    # common = min(3,1) for b = 1; P = 1/3; R = 1/2; F1 = 2*(1/6)/(5/6) = 0.4
    assert f1_score("a b b b", "b c") == pytest.approx(0.4)


def test_f1_is_max_over_golds():
    # gold 1 "x y": common 0 -> 0; gold 2 "cat": P = 1/2, R = 1 -> F1 = 2/3
    assert f1_score("cat dog", ["x y", "cat"]) == pytest.approx(2 / 3)


def test_sub_exact_match_whole_tokens():
    assert sub_exact_match("It is Paris, France.", ["Paris"]) == 1.0
    assert sub_exact_match("It was in 19905", "1990") == 0.0  # not inside a longer token
    assert sub_exact_match("category", "cat") == 0.0
    assert sub_exact_match("new york city", ["London", "New York"]) == 1.0


def test_retrieval_recall():
    passages = ["Hamlet\nWritten by William Shakespeare.", "Paris is in France"]
    assert retrieval_recall(passages, ["shakespeare"]) == 1.0
    assert retrieval_recall(passages, ["Marlowe", "the"]) == 0.0  # "the" normalises to ""
    assert retrieval_recall([], "Paris") == 0.0
    assert retrieval_recall(["born 19905"], "1990") == 0.0


def _pass_at_k_brute(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (first c correct) that contain a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_and_closed_form():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
                assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute(n, c, k), abs=1e-12)


def test_pass_at_k_hand_cases_and_large_n():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a correct one
    # pass@1 = c / n, also where C(n, k) would be astronomically large
    assert pass_at_k(10_000, 2_500, 1) == pytest.approx(0.25)
    assert 0.0 <= pass_at_k(10_000, 3, 5_000) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_pass_at_k_rejects_invalid_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_bootstrap_ci_deterministic_and_brackets_mean():
    values = np.random.default_rng(1).random(200)
    mean, lo, hi = bootstrap_ci(values, n_boot=500, seed=3)
    assert mean == pytest.approx(values.mean())
    assert lo <= mean <= hi
    assert bootstrap_ci(values, n_boot=500, seed=3) == (mean, lo, hi)
    assert bootstrap_ci(values, n_boot=500, seed=4) != (mean, lo, hi)
    # a wider interval for a smaller alpha
    _, lo99, hi99 = bootstrap_ci(values, n_boot=500, alpha=0.01, seed=3)
    assert lo99 <= lo and hi <= hi99


def test_bootstrap_ci_constant_values_have_zero_width():
    assert bootstrap_ci([0.5] * 7) == (0.5, 0.5, 0.5)


def test_bootstrap_ci_rejects_empty():
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_paired_bootstrap_diff_ci():
    rng = np.random.default_rng(0)
    b = rng.random(300)
    a = b + 0.1  # every item improves by exactly 0.1
    assert paired_bootstrap_diff_ci(a, b) == pytest.approx((0.1, 0.1, 0.1))
    a_noisy = b + 0.1 + rng.normal(0, 0.05, size=300)
    diff, lo, hi = paired_bootstrap_diff_ci(a_noisy, b, seed=5)
    assert lo <= diff <= hi and lo > 0.0
    assert paired_bootstrap_diff_ci(a_noisy, b, seed=5) == (diff, lo, hi)
    with pytest.raises(ValueError):
        paired_bootstrap_diff_ci([1.0, 2.0], [1.0])


def test_replicate_paired_diff_ci_averages_each_item_over_replicates():
    # item 0 gains 1 in both replicates, item 1 gains 1 in one: per-item 1.0 and 0.5
    a = [[1.0, 1.0], [1.0, 0.0]]
    b = [[0.0, 0.0], [0.0, 0.0]]
    diff, lo, hi = replicate_paired_diff_ci(a, b, n_boot=500)
    assert diff == pytest.approx(0.75)
    assert 0.5 <= lo <= diff <= hi <= 1.0
    assert replicate_paired_diff_ci([[0.2, 0.2]], [[0.1, 0.1]]) == pytest.approx((0.1, 0.1, 0.1))


def test_replicate_paired_diff_ci_resamples_items_not_replicates():
    # every item gains 1 in exactly one of two replicates: each item averages 0.5,
    # so no resample of items can move the mean (pooling the six cells would)
    a = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    b = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert replicate_paired_diff_ci(a, b) == pytest.approx((0.5, 0.5, 0.5))


def test_replicate_paired_diff_ci_with_one_replicate_is_the_paired_ci():
    a, b = [0.3, 0.9, 0.0, 1.0, 0.5], [0.1, 0.2, 0.4, 1.0, 0.0]
    assert replicate_paired_diff_ci([a], [b], seed=3) == paired_bootstrap_diff_ci(a, b, seed=3)


def test_replicate_paired_diff_ci_rejects_mismatched_tables():
    with pytest.raises(ValueError, match="replicates, items"):
        replicate_paired_diff_ci([[1.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="replicates, items"):
        replicate_paired_diff_ci([1.0, 0.0], [1.0, 0.0])



def test_clustered_auroc_ci_resamples_whole_questions():
    # question a ranks its sound slice first, question b last: over both, pairs won 0.9>0.1,
    # 0.9>0.8, 0.2>0.1, lost 0.2<0.8 → 3/4; a resample is a+a (1.0), b+b (0.0) or a+b (0.75)
    labels, scores, clusters = [True, False, True, False], [0.9, 0.1, 0.2, 0.8], "aabb"
    auroc, lo, hi = clustered_auroc_ci(labels, scores, list(clusters), n_boot=400, seed=1)
    assert (auroc, lo, hi) == (0.75, 0.0, 1.0)
    assert clustered_auroc_ci([True, False], [0.7, 0.2], ["a", "b"], n_boot=50) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="both labels"):
        clustered_auroc_ci([True, True], [0.7, 0.2], ["a", "b"])
