"""REX-RAG's policy correction, by hand-computed values (``advrag.core.rex_rag``)."""

from __future__ import annotations

import math

import pytest
import torch

from advrag.core.rex_rag import behaviour_log_prob, pool_next_token_probs, probe_prefix_prob


def test_the_mixture_of_policy_and_probe():
    old = torch.log(torch.tensor([0.5, 0.2, 0.8]))
    probe = torch.tensor([0.0, 1.0, 0.4])
    got = behaviour_log_prob(old, probe, probe_share=0.25)
    # 0.75·0.5 + 0.25·0 = 0.375; 0.75·0.2 + 0.25·1 = 0.4; 0.75·0.8 + 0.25·0.4 = 0.7
    assert torch.allclose(got, torch.log(torch.tensor([0.375, 0.4, 0.7])))


def test_no_probes_leave_the_old_policy_and_all_probes_the_probe_policy():
    old = torch.log(torch.tensor([0.5, 0.1]))
    probe = torch.tensor([0.3, 0.0])
    assert torch.equal(behaviour_log_prob(old, probe, 0.0), old)
    only = behaviour_log_prob(old, probe, 1.0)
    assert math.isclose(only[0].item(), math.log(0.3), rel_tol=1e-6)
    assert only[1].item() == -math.inf  # a token the probe policy never emits


def test_a_tiny_old_probability_does_not_underflow():
    old = torch.tensor([-200.0])  # exp(-200) underflows float32
    got = behaviour_log_prob(old, torch.tensor([0.0]), 0.5)
    assert math.isclose(got.item(), -200.0 + math.log(0.5), rel_tol=1e-6)


@pytest.mark.parametrize(("probe", "share", "message"), [
    (torch.tensor([0.1]), 1.5, "share in"), (torch.tensor([-0.1]), 0.5, "negative"),
    (torch.tensor([0.1, 0.2]), 0.5, "one shape")])
def test_bad_inputs_are_named(probe, share, message):
    with pytest.raises(ValueError, match=message):
        behaviour_log_prob(torch.tensor([-1.0]), probe, share)


def test_the_pools_next_token_distribution():
    pool = [[1, 2, 3], [1, 2, 4], [1, 5], [6]]
    # t=0: all four candidates, three start with 1 → 3/4; t=1: [1,2,3], [1,2,4], [1,5] start
    # with [1] → two have 2 → 2/3; t=2: [1,2,3], [1,2,4] → one has 3 → 1/2
    assert pool_next_token_probs(pool, [1, 2, 3]) == [0.75, 2 / 3, 0.5]
    # t=0: 1/4; t=1: [1,2,3], [1,2,4], [1,5] → 1/3
    assert pool_next_token_probs(pool, [1, 5]) == [0.75, 1 / 3]
    assert pool_next_token_probs(pool, [6]) == [0.25]


def test_a_prompt_longer_than_its_neighbours_is_certain_once_alone():
    pool = [[7, 8], [7, 8, 9, 10]]
    # t=2: only the long prompt is longer than 2 → 1.0; t=3 too
    assert pool_next_token_probs(pool, [7, 8, 9, 10]) == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="not one of the pool's prompts"):
        pool_next_token_probs(pool, [7, 9])


def test_the_probe_prefix_spreads_the_failure_rate_over_its_tokens():
    old = torch.log(torch.tensor([0.5, 0.25]))
    got = probe_prefix_prob(old, failure_rate=0.25)
    # z^(1/2) = 0.5: 0.5 / 0.5 = 1.0, 0.25 / 0.5 = 0.5; the product 0.5 = (0.5·0.25) / 0.25
    assert torch.allclose(got, torch.tensor([1.0, 0.5]))
    assert torch.allclose(probe_prefix_prob(old, 1.0), old.exp())  # every trajectory fails
    assert probe_prefix_prob(torch.empty(0), 0.5).numel() == 0
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        probe_prefix_prob(old, 0.0)
    with pytest.raises(ValueError, match="shape"):
        probe_prefix_prob(old.reshape(1, 2), 0.5)


def test_the_exploration_pools_nest_and_hold_distinct_prompts():
    from advrag.agents.prompts import exploration_pool

    small, medium, full = exploration_pool(5), exploration_pool(15), exploration_pool(30)
    assert (len(small), len(medium), len(full)) == (5, 15, 30)
    assert full[:15] == medium and medium[:5] == small  # a smaller pool is a prefix
    assert len(set(full)) == 30 and not any(p.startswith("#") for p in full)
    with pytest.raises(ValueError, match="choose 1 to 30"):
        exploration_pool(31)


def test_probes_rank_by_the_mean_log_prob_of_their_inserted_prompt():
    from advrag.core.rex_rag import probe_ranking

    probes = [torch.tensor([-1.0, -3.0]),  # mean -2.0
              torch.tensor([-0.5]),  # mean -0.5
              torch.tensor([-2.0, -2.0, -2.0]),  # mean -2.0, ties with probe 0: after it
              torch.tensor([-4.0, 0.0])]  # mean -2.0 as well
    assert probe_ranking(probes) == [1, 0, 2, 3]
    with pytest.raises(ValueError, match="probe 1 has no inserted prompt tokens"):
        probe_ranking([torch.tensor([-1.0]), torch.empty(0)])


def test_how_many_probes_stay_and_how_the_ratio_moves():
    from advrag.core.rex_rag import probes_to_keep, updated_keep_ratio

    assert probes_to_keep(0.12, 2, 4) == 1  # 0.96 → 1
    assert probes_to_keep(0.12, 4, 5) == 2  # 2.4 → 2
    assert probes_to_keep(0.125, 4, 5) == 3  # 2.5 → 3 (halves up)
    assert probes_to_keep(0.0, 8, 8) == 0
    with pytest.raises(ValueError, match="keep_ratio"):
        probes_to_keep(1.5, 2, 4)
    assert updated_keep_ratio(0.12, 0.5) == pytest.approx(0.9 * 0.12 + 0.1 * 0.5)  # 0.158
    assert updated_keep_ratio(0.2, 0.2) == pytest.approx(0.2)  # already at the accuracy
