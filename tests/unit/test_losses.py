"""Hand-worked cases and invariants for advrag.core.losses."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from advrag.core.losses import (
    aggregate_loss,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
    policy_loss,
)

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _one_token(ratio: float, advantage: float) -> tuple[torch.Tensor, ...]:
    logprobs = torch.tensor([[math.log(ratio)]], requires_grad=True)
    return logprobs, torch.zeros(1, 1), torch.tensor([[advantage]]), torch.ones(1, 1)


@pytest.mark.parametrize(
    ("ratio", "advantage", "dual_clip", "loss", "grad"),
    [
        (
            1.5,
            1.0,
            3.0,
            -1.2,
            0.0,
        ),  # −A·clip(1.5, 0.8, 1.2) = −1.2 beats −1.5; clipped → no gradient
        (0.5, -1.0, 3.0, 0.8, 0.0),  # max(0.5, 0.8) = 0.8 (clip at 1 − 0.2); below the cap 3
        (1.1, 1.0, 3.0, -1.1, -1.1),  # inside the range: −A·r, d/dlogp = −A·r = −1.1
        (0.5, 1.0, 3.0, -0.5, -0.5),  # A > 0 and r < 0.8: max(−0.5, −0.8) keeps the unclipped term
        (4.0, -1.0, 3.0, 3.0, 0.0),  # max(4, 1.2) = 4, dual clip caps at −A·c = 3
        (4.0, -1.0, None, 4.0, 4.0),  # no dual clip: 4, d/dlogp = −A·r = 4
        (4.0, 1.0, 3.0, -1.2, 0.0),  # dual clip never touches A > 0
    ],
)
def test_ppo_clip_hand_computed(ratio, advantage, dual_clip, loss, grad):
    logprobs, old, adv, mask = _one_token(ratio, advantage)
    value, _ = policy_loss(logprobs, old, adv, mask, dual_clip=dual_clip)
    value.backward()
    assert value.item() == pytest.approx(loss, abs=1e-6)
    assert logprobs.grad.item() == pytest.approx(grad, abs=1e-6)


def test_asymmetric_clip_range():
    # clip_low 0.2, clip_high 0.28 (DAPO-style): r = 1.5, A = +1 → −1.28; r = 0.5, A = −1 → 0.8
    for ratio, advantage, expected in [(1.5, 1.0, -1.28), (0.5, -1.0, 0.8)]:
        logprobs, old, adv, mask = _one_token(ratio, advantage)
        value, _ = policy_loss(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.28)
        assert value.item() == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(*_one_token(1.0, 1.0), dual_clip=1.0)


def _four_token_batch():
    # tokens: (r 1.5, A +1) clipped; (r 0.5, A −1) clipped; (r 4, A −1) dual-clipped; (r 1.1, A +1) free
    # a fifth, masked token carries garbage that must change nothing
    ratios = torch.tensor([[1.5, 0.5, 4.0, 1.1, 7.0]])
    logprobs = ratios.log().requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    return logprobs, torch.zeros(1, 5), adv, mask


def test_policy_loss_metrics_and_gradient():
    logprobs, old, adv, mask = _four_token_batch()
    loss, metrics = policy_loss(logprobs, old, adv, mask)
    # per-token losses −1.2, 0.8, 3, −1.1 → token-mean 1.5 / 4 = 0.375
    assert loss.item() == pytest.approx(0.375, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(3 / 4)
    assert metrics["dual_clip_fraction"] == pytest.approx(1 / 4)
    # ratio mean (1.5 + 0.5 + 4 + 1.1) / 4 = 1.775; approx_kl = mean(−log r) = −log(3.3) / 4
    assert metrics["ratio_mean"] == pytest.approx(1.775, abs=1e-6)
    assert metrics["approx_kl"] == pytest.approx(-math.log(3.3) / 4, abs=1e-6)
    assert all(isinstance(v, float) for v in metrics.values())
    # only the free token has a gradient: d/dlogp of −A·r / 4 = −1.1 / 4
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 0.0, 0.0, -0.275, 0.0]]))


def _random_batch(gen, batch=4, seq=6):
    logprobs = -torch.rand(batch, seq, generator=gen, dtype=torch.float64) * 3
    old = logprobs + 0.3 * torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    adv = torch.randn(batch, seq, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([seq, 1, 3, 0])[:batch]
    mask = torch.arange(seq)[None, :] < lengths[:, None]
    return logprobs, old, adv, mask


@pytest.mark.parametrize("agg", AGG_MODES)
def test_masked_tokens_get_exactly_zero_gradient(agg):
    gen = torch.Generator().manual_seed(1)
    logprobs, old, adv, mask = _random_batch(gen)
    # garbage on masked tokens: huge ratios and advantages
    logprobs = torch.where(mask, logprobs, 15.0).requires_grad_(True)
    adv = torch.where(mask, adv, -1e4)
    loss, _ = policy_loss(logprobs, old, adv, mask, agg=agg)
    loss.backward()
    assert (logprobs.grad[~mask] == 0).all()
    assert (logprobs.grad[mask] != 0).any()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_padding_does_not_change_the_loss(agg):
    gen = torch.Generator().manual_seed(2)
    logprobs, old, adv, mask = _random_batch(gen)
    horizon = 10  # a constant horizon, as Dr.GRPO uses; other modes ignore it

    def pad(x, value):  # three extra columns and one extra all-padding row
        x = torch.cat([x, torch.full((x.shape[0], 3), value, dtype=x.dtype)], dim=1)
        return torch.cat([x, torch.full((1, x.shape[1]), value, dtype=x.dtype)], dim=0)

    loss, metrics = policy_loss(logprobs, old, adv, mask, agg=agg, horizon=horizon)
    padded_loss, padded_metrics = policy_loss(
        pad(logprobs, 5.0),
        pad(old, -5.0),
        pad(adv, 7.0),
        pad(mask, False),
        agg=agg,
        horizon=horizon,
    )
    torch.testing.assert_close(padded_loss, loss)
    assert padded_metrics == pytest.approx(metrics)


def test_aggregation_modes_hand_computed_on_uneven_lengths():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # token-mean: (1 + 2 + 3 + 4) / 4 = 2.5
    assert aggregate_loss(per_token, mask, "token-mean").item() == pytest.approx(2.5)
    # seq-mean-token-mean: mean(6 / 3, 4 / 1) = mean(2, 4) = 3
    assert aggregate_loss(per_token, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    # seq-mean-token-sum-norm, horizon = 3 columns: mean(6 / 3, 4 / 3) = 10 / 6
    assert aggregate_loss(per_token, mask, "seq-mean-token-sum-norm").item() == pytest.approx(
        10 / 6
    )
    # an explicit horizon 4: mean(6 / 4, 4 / 4) = 1.25
    got = aggregate_loss(per_token, mask, "seq-mean-token-sum-norm", horizon=4)
    assert got.item() == pytest.approx(1.25)


def test_aggregation_edge_cases():
    per_token = torch.tensor([[1.0, 2.0]])
    for mode in AGG_MODES:
        assert aggregate_loss(per_token, torch.zeros(1, 2), mode).item() == 0.0  # not NaN
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(per_token, torch.ones(1, 2), "seq-sum")
    with pytest.raises(ValueError, match="differ"):
        aggregate_loss(per_token, torch.ones(1, 3))
    with pytest.raises(ValueError, match="horizon"):
        aggregate_loss(per_token, torch.ones(1, 2), "seq-mean-token-sum-norm", horizon=0)


def test_kl_estimators_hand_computed():
    half, quarter = math.log(0.5), math.log(0.25)
    logp, logq = torch.tensor([[half, quarter]]), torch.tensor([[quarter, half]])
    d = math.log(2)  # log p − log q of the first token; the second is −d
    # k1 = ±d; k2 = ½d² = 0.240227 for both
    torch.testing.assert_close(kl_penalty(logp, logq, "k1"), torch.tensor([[d, -d]]))
    torch.testing.assert_close(kl_penalty(logp, logq, "k2"), torch.tensor([[0.5 * d * d] * 2]))
    # k3 = q/p − log(q/p) − 1: 0.5 + d − 1 = 0.193147; 2 − d − 1 = 0.306853
    torch.testing.assert_close(kl_penalty(logp, logq, "k3"), torch.tensor([[d - 0.5, 1 - d]]))
    # log q − log p = 5: e⁵ − 5 − 1 = 142.4, clamped to 10
    assert kl_penalty(torch.tensor([[0.0]]), torch.tensor([[5.0]]), "k3").item() == 10.0
    with pytest.raises(ValueError, match="k1"):
        kl_penalty(logp, logq, "k4")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-30, 0), min_size=1, max_size=8), st.floats(-1e-3, 1e-3))
def test_k3_and_k2_are_non_negative_and_zero_at_equality(values, shift):
    logp = torch.tensor([values])
    for kind in ("k2", "k3"):
        assert (kl_penalty(logp, logp + shift, kind) >= 0).all()
        assert (kl_penalty(logp, logp.clone(), kind) == 0).all()


def test_k1_and_k3_are_unbiased_estimates_of_kl():
    # sample tokens from p; the means of k1 and k3 approach KL(p ‖ q) = Σ p log(p / q)
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    exact = (p * (p / q).log()).sum().item()  # 0.5 ln 2.5 + 0.2 ln 0.4 = 0.274889
    tokens = torch.multinomial(
        p, 200_000, replacement=True, generator=torch.Generator().manual_seed(3)
    )
    logp, logq = p.log()[tokens][None], q.log()[tokens][None]
    for kind in ("k1", "k3"):
        assert kl_penalty(logp, logq, kind).mean().item() == pytest.approx(exact, abs=0.01)


def test_entropy_from_logits():
    vocab = 7
    uniform = torch.full((2, 3, vocab), 1e4, dtype=torch.float64)  # no overflow at huge logits
    torch.testing.assert_close(
        entropy_from_logits(uniform), torch.full((2, 3), math.log(vocab), dtype=torch.float64)
    )
    peaked = torch.tensor([[[0.0, 200.0, 0.0]]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(4))
    reference = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), reference)
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32


def test_logprobs_from_logits():
    # logits [0, ln 3] → probabilities [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    got = logprobs_from_logits(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(got, torch.tensor([[math.log(0.75), math.log(0.25)]]))
    logits = torch.randn(3, 5, 13, generator=torch.Generator().manual_seed(5))
    ids = torch.randint(0, 13, (3, 5), generator=torch.Generator().manual_seed(6))
    reference = torch.distributions.Categorical(logits=logits).log_prob(ids)
    torch.testing.assert_close(logprobs_from_logits(logits, ids), reference)
    assert logprobs_from_logits(logits.half(), ids).dtype == torch.float32
    with pytest.raises(ValueError, match="do not match"):
        logprobs_from_logits(logits, ids[:, :4])
