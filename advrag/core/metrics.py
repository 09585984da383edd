"""Answer and retrieval metrics: EM, F1, sub-EM, pass@k, recall, bootstrap CIs.

Normalisation follows the SQuAD evaluation script: lower-case, drop ASCII
punctuation, drop the articles a/an/the (as whole words), collapse whitespace.

Conventions (pinned in ``tests/unit/test_metrics.py``):

- ``prediction=None`` is scored as the empty string.
- ``golds`` may be one string or a sequence of strings; scores are the max over
  golds, and an empty sequence of golds scores 0.0 everywhere.
- Empty strings follow SQuAD: a gold that normalises to "" matches only a
  prediction that also normalises to "" (EM 1, F1 1); an empty prediction
  against a non-empty gold gets EM 0 and F1 0.
- Containment (``sub_exact_match``, ``retrieval_recall``) is checked on whole
  normalised tokens: gold "1990" is inside "born in 1990" but not inside
  "19905", and "cat" is not inside "category". This departs from the plain
  substring test of FlashRAG/Search-R1, which over-credits short golds
  (numbers, years) inside longer tokens.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_BOOT_CHUNK_ELEMS = 4_000_000  # bound memory of one resampling block (int64 indices)

Golds = str | Sequence[str]


def normalize_answer(s: str | None) -> str:
    """SQuAD normalisation, so that EM/F1 ignore case, punctuation and articles."""
    text = (s or "").lower().translate(_PUNCT_TABLE)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _gold_list(golds: Golds) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str | None, golds: Golds) -> float:
    """1.0 if the normalised prediction equals any normalised gold, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _gold_list(golds)))


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golds: Golds) -> float:
    """Token-level F1 (bag of normalised tokens), max over golds; partial credit for answers."""
    pred_tokens = normalize_answer(prediction).split()
    return max(
        (_token_f1(pred_tokens, normalize_answer(g).split()) for g in _gold_list(golds)),
        default=0.0,
    )


def _contains_tokens(haystack: str, needle: str) -> bool:
    """Whole-token containment of one normalised string in another."""
    return f" {needle} " in f" {haystack} "


def sub_exact_match(prediction: str | None, golds: Golds) -> float:
    """1.0 if some normalised gold occurs (as whole tokens) in the normalised prediction.

    Lenient EM for verbose answers ("it is Paris, France" vs "Paris"). A gold
    that normalises to "" only matches an empty prediction.
    """
    pred = normalize_answer(prediction)
    for gold in _gold_list(golds):
        norm = normalize_answer(gold)
        if (norm and _contains_tokens(pred, norm)) or (not norm and not pred):
            return 1.0
    return 0.0


def retrieval_recall(passages_texts: Sequence[str], golds: Golds) -> float:
    """1.0 if any non-empty normalised gold occurs (whole tokens) in any normalised passage.

    Answer recall of a retrieval step; golds that normalise to "" are ignored.
    """
    norm_golds = [g for g in map(normalize_answer, _gold_list(golds)) if g]
    for passage in map(normalize_answer, passages_texts):
        if any(_contains_tokens(passage, g) for g in norm_golds):
            return 1.0
    return 0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) to avoid huge binomials.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _bootstrap_means(values: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Means of ``n_boot`` resamples (with replacement) of ``values``, shape (n_boot,)."""
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    rows_per_chunk = max(1, _BOOT_CHUNK_ELEMS // n)
    means = []
    for start in range(0, n_boot, rows_per_chunk):
        rows = min(rows_per_chunk, n_boot - start)
        means.append(values[rng.integers(0, n, size=(rows, n))].mean(axis=1))
    return np.concatenate(means)


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """Sample mean and percentile-bootstrap (1 - alpha) interval: (mean, lo, hi).

    Deterministic for a given seed, so reports and promotion decisions reproduce.
    """
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if n_boot < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"need n_boot >= 1 and 0 < alpha < 1, got {n_boot}, {alpha}")
    means = _bootstrap_means(arr, n_boot, seed)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(arr.mean()), float(lo), float(hi)


def paired_bootstrap_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean of a - b over paired items with a percentile-bootstrap interval: (diff, lo, hi).

    Items are resampled jointly (the same questions for both systems), which is
    what a promotion gate needs: "is the candidate better on the same questions".
    """
    arr_a = np.asarray(a, dtype=np.float64).reshape(-1)
    arr_b = np.asarray(b, dtype=np.float64).reshape(-1)
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"paired samples differ in length: {arr_a.size} vs {arr_b.size}")
    return bootstrap_ci(arr_a - arr_b, n_boot=n_boot, alpha=alpha, seed=seed)


def replicate_paired_diff_ci(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Paired difference a - b averaged over replicate runs, with a bootstrap over items.

    ``a[r][i]`` and ``b[r][i]`` score item i in replicate r (e.g. a training seed). Each
    item's difference is averaged over the replicates first, then the items are
    resampled as in :func:`paired_bootstrap_diff_ci`: the interval is over items, for
    these replicates (their own spread is averaged, not resampled).
    """
    arr_a = np.asarray(a, dtype=np.float64)
    arr_b = np.asarray(b, dtype=np.float64)
    if arr_a.ndim != 2 or arr_a.shape != arr_b.shape or arr_a.shape[0] == 0:
        raise ValueError("replicate scores must be two equal (replicates, items) tables, got "
                         f"shapes {arr_a.shape} and {arr_b.shape}")
    return bootstrap_ci((arr_a - arr_b).mean(axis=0), n_boot=n_boot, alpha=alpha, seed=seed)


def clustered_auroc_ci(
    labels: Sequence[bool],
    scores: Sequence[float],
    clusters: Sequence[str],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """AUROC of ``scores`` for ``labels`` with a percentile-bootstrap interval over clusters.

    Items of one cluster (the slices of one question) are correlated, so whole clusters are
    resampled, not items. A resample holding one label has no AUROC and is drawn again.
    Returns (auroc, lo, hi); deterministic for a given seed.
    """
    from sklearn.metrics import roc_auc_score

    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    if not y.shape == s.shape == (len(clusters),) or y.all() or not y.any():
        raise ValueError("clustered_auroc_ci needs equal-length labels, scores and clusters, "
                         "with both labels present")
    members: dict[str, list[int]] = {}
    for i, c in enumerate(clusters):
        members.setdefault(c, []).append(i)
    groups = [np.asarray(m) for m in members.values()]
    rng = np.random.default_rng(seed)
    aurocs: list[float] = []
    while len(aurocs) < n_boot:
        rows = np.concatenate([groups[g] for g in rng.integers(0, len(groups), len(groups))])
        if y[rows].all() or not y[rows].any():
            continue
        aurocs.append(float(roc_auc_score(y[rows], s[rows])))
    lo, hi = np.quantile(aurocs, [alpha / 2, 1 - alpha / 2])
    return float(roc_auc_score(y, s)), float(lo), float(hi)
