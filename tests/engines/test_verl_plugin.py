"""advrag's estimators and loss inside verl 0.9.1 (`make verl` installs it on the CPU).

verl loads the plugin the two ways it offers (``VERL_USE_EXTERNAL_MODULES``, the
``verl.plugins`` entry point), and each registered function, called through verl's own
registry, equals our local function and verl's counterpart on random batches, except
where the module docstring says they differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed here: run `make verl`")

from omegaconf import OmegaConf  # noqa: E402 (verl brings it)
from verl.trainer.ppo import core_algos  # noqa: E402

from advrag.core.advantages import ADVANTAGE_ESTIMATORS  # noqa: E402
from advrag.core.losses import policy_loss  # noqa: E402
from advrag.engines.verl import PREFIX, REGISTERED  # noqa: E402

LISTED = ("from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as A, "
          "POLICY_LOSS_REGISTRY as L; import json; "
          "print(json.dumps(sorted(n for n in [*A, *L] if n.startswith('advrag_'))))")


def registered_in_a_fresh_verl(env: dict[str, str]) -> list[str]:
    """The advrag names a new process's ``import verl`` registers under ``env``."""
    out = subprocess.run([sys.executable, "-c", "import verl; " + LISTED], check=True,
                         capture_output=True, text=True, env=os.environ | env).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_verl_loads_the_plugin_by_module_and_by_entry_point():
    expected = sorted([*(f"advrag_{n}" for n in ADVANTAGE_ESTIMATORS), "advrag_ppo"])
    assert {"advrag_grpo", "advrag_drgrpo", "advrag_reinforce_pp"} <= set(expected)
    assert sorted(REGISTERED) == expected
    by_module = {"VERL_USE_EXTERNAL_MODULES": "advrag.engines.verl",
                 "VERL_USE_EXTERNAL_PLUGINS": "none"}
    assert registered_in_a_fresh_verl(by_module) == expected
    by_entry_point = {"VERL_USE_EXTERNAL_MODULES": "", "VERL_USE_EXTERNAL_PLUGINS": "advrag"}
    assert registered_in_a_fresh_verl(by_entry_point) == expected
    assert registered_in_a_fresh_verl({"VERL_USE_EXTERNAL_MODULES": "",
                                       "VERL_USE_EXTERNAL_PLUGINS": "none"}) == []


def outcome_batch(seed: int, group_sizes: list[int], length: int = 12):
    """verl's outcome layout: each response's score on its last valid token; mask, uids."""
    rng = np.random.default_rng(seed)
    batch = sum(group_sizes)
    lengths = rng.integers(1, length + 1, size=batch)
    mask = torch.tensor(np.arange(length)[None, :] < lengths[:, None], dtype=torch.float32)
    scores = torch.tensor(rng.normal(size=batch), dtype=torch.float32)
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), torch.tensor(lengths - 1)] = scores
    index = np.array([f"prompt-{g}" for g, size in enumerate(group_sizes) for _ in range(size)],
                     dtype=object)
    return rewards, mask, index, scores


ALGO = OmegaConf.create({"norm_adv_by_std_in_grpo": True})


@pytest.mark.parametrize("seed", range(5))
def test_our_estimators_through_verl_equal_ours_and_verls(seed):
    rewards, mask, index, scores = outcome_batch(seed, [4, 2, 3, 4])
    groups = [str(i) for i in index]
    for name, verl_twin in (("grpo", dict(norm_adv_by_std_in_grpo=True)),
                            ("drgrpo", dict(norm_adv_by_std_in_grpo=False))):
        ours, returns = core_algos.get_adv_estimator_fn(PREFIX + name)(
            token_level_rewards=rewards, response_mask=mask, index=index, config=ALGO)
        assert torch.equal(ours, returns)
        local = ADVANTAGE_ESTIMATORS[name](scores, groups, mask)
        torch.testing.assert_close(ours, local * mask)
        theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, **verl_twin)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    ours, _ = core_algos.get_adv_estimator_fn(PREFIX + "reinforce_pp")(
        token_level_rewards=rewards, response_mask=mask, index=index, config=ALGO)
    theirs, _ = core_algos.get_adv_estimator_fn("reinforce_plus_plus_baseline")(
        token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=ALGO)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_a_lone_rollout_gets_no_grpo_advantage_where_verl_passes_its_score():
    rewards, mask, index, scores = outcome_batch(0, [3, 1])
    ours, _ = core_algos.get_adv_estimator_fn("advrag_grpo")(
        token_level_rewards=rewards, response_mask=mask, index=index, config=ALGO)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(ours[:3], theirs[:3], atol=1e-5, rtol=1e-5)
    assert torch.count_nonzero(ours[3]) == 0
    assert torch.allclose(theirs[3][mask[3].bool()], scores[3])  # verl: mean 0, std 1


def actor_config(clip: float = 0.2, low: float | None = None, high: float | None = 0.28,
                 dual: float = 3.0):
    return OmegaConf.create({"clip_ratio": clip, "clip_ratio_low": low, "clip_ratio_high": high,
                             "clip_ratio_c": dual, "global_batch_info": {"dp_size": 1}})


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("seed", range(3))
def test_our_loss_through_verl_equals_verls_vanilla_and_ours(mode, seed):
    generator = torch.Generator().manual_seed(seed)
    shape = (6, 10)
    old = -torch.rand(shape, generator=generator) * 3
    new = (old + torch.randn(shape, generator=generator) * 0.4).requires_grad_(True)
    advantages = torch.randn(shape, generator=generator)
    mask = (torch.rand(shape, generator=generator) > 0.25).float()
    config = actor_config()
    ours, metrics = core_algos.get_policy_loss_fn("advrag_ppo")(
        old_log_prob=old, log_prob=new, advantages=advantages, response_mask=mask,
        loss_agg_mode=mode, config=config)
    theirs, their_metrics = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=new, advantages=advantages, response_mask=mask,
        loss_agg_mode=mode, config=config)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    (grad_ours,) = torch.autograd.grad(ours, new)
    (grad_theirs,) = torch.autograd.grad(theirs, new)
    torch.testing.assert_close(grad_ours, grad_theirs, atol=1e-6, rtol=1e-5)
    assert metrics["actor/ppo_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=1e-6)
    local, _ = policy_loss(new, old, advantages, mask, clip_low=0.2, clip_high=0.28,
                           dual_clip=3.0, agg=mode)
    torch.testing.assert_close(ours, local)


def test_the_loss_refuses_what_it_does_not_do():
    shape = (2, 3)
    args = dict(old_log_prob=torch.zeros(shape), log_prob=torch.zeros(shape),
                advantages=torch.ones(shape), response_mask=torch.ones(shape))
    loss = core_algos.get_policy_loss_fn("advrag_ppo")
    with pytest.raises(ValueError, match="actor config"):
        loss(**args)
    with pytest.raises(ValueError, match="rollout correction"):
        loss(**args, config=actor_config(), rollout_is_weights=torch.ones(shape))
    with pytest.raises(ValueError, match="uid"):
        core_algos.get_adv_estimator_fn("advrag_grpo")(
            token_level_rewards=torch.ones(shape), response_mask=torch.ones(shape))
