"""REX-RAG's correction on an encoded batch: token roles, μ and the mixture, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from advrag.agents.probes import pool_token_ids
from advrag.agents.types import ProbeOrigin, Trajectory
from advrag.engines.local.tokenize import encode_trajectories
from advrag.recipes.rex_rag.correction import Correction, token_roles

POOL = ["check again now", "check the sources"]


class WordTokenizer:
    """One id per whitespace-separated word (ids given in order of first sight)."""

    pad_token_id = 0

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab) + 1) for w in text.split()]}


def _trajectories() -> list[Trajectory]:
    """A policy trajectory and a probe: prompt | prefix a b | check again now | doc | c."""
    policy = Trajectory()
    for text, source in (("q1 q2", "prompt"), ("a b", "policy"), ("doc", "env"), ("c", "policy")):
        policy.add(text, source)
    probe = Trajectory()
    for text, source in (("q1 q2", "prompt"), ("a b", "policy"), ("\ncheck again now\n", "probe"),
                         ("doc", "env"), ("c", "policy")):
        probe.add(text, source)
    probe.probe = ProbeOrigin(origin=0, segment=2, prompt=0)
    return [policy, probe]


def _batch_and_old():
    tokenizer = WordTokenizer()
    trajectories = _trajectories()
    batch = encode_trajectories(trajectories, tokenizer, max_len=32)
    # probe row tokens: 0 q1, 1 q2, 2 a, 3 b, 4 check, 5 again, 6 now, 7 doc, 8 c
    old = torch.log(torch.tensor([[0.5, 0.5, 0.25, 0.25, 0.4, 0.5, 0.5, 0.5, 0.5],
                                  [0.5, 0.5, 0.25, 0.25, 0.1, 0.1, 0.1, 0.5, 0.4]]))
    return tokenizer, trajectories, batch, old


def test_token_roles_of_a_policy_trajectory_and_a_probe():
    _, trajectories, batch, _ = _batch_and_old()
    roles = {name: mask.nonzero().tolist() for name, mask in token_roles(batch, trajectories).items()}
    assert roles["policy"] == [[0, 2], [0, 3], [0, 5]]  # a b c (the row is 6 tokens long)
    assert roles["prefix"] == [[1, 2], [1, 3]]
    assert roles["prompt"] == [[1, 4], [1, 5], [1, 6]]
    assert roles["continuation"] == [[1, 8]]  # doc (env) has no role


@pytest.mark.parametrize("correction, prompt_mix", [
    # a = ½: μ_mix = ½·0.1 + ½·μ; fine μ = pool shares [1, ½, 1]; coarse μ = [1/|pool|, 1, 1]
    ("fine", [0.55, 0.30, 0.55]),
    ("coarse", [0.30, 0.55, 0.55]),
])
def test_behaviour_log_prob_per_role_by_hand(correction, prompt_mix):
    tokenizer, trajectories, batch, old = _batch_and_old()
    hook = Correction(trajectories, pool_token_ids(POOL, tokenizer), probe_share=0.5,
                      failure_rate=0.5, correction=correction)
    mix = hook(batch, old).exp()
    # policy row: μ = 0, so μ_mix = ½·π_old and the ratio π_old/μ_mix is 2
    assert mix[0, [2, 3, 5]].tolist() == pytest.approx([0.125, 0.125, 0.25])
    # prefix (j = 2): μ = 0.25 / 0.5^(1/2) = 0.353553…; μ_mix = ½·0.25 + ½·0.353553 = 0.301777
    assert mix[1, [2, 3]].tolist() == pytest.approx([0.301777] * 2, abs=1e-6)
    assert mix[1, [4, 5, 6]].tolist() == pytest.approx(prompt_mix)
    assert mix[1, 8].item() == pytest.approx(0.4)  # continuation: μ = π_old
    prompt_ratios = [0.1 / m for m in prompt_mix]
    assert hook.ratios == pytest.approx({"policy": 2.0, "prefix": 0.25 / 0.301777,
                                         "prompt": sum(prompt_ratios) / 3, "continuation": 1.0},
                                        rel=1e-5)


def test_coarse_and_fine_corrections_differ_only_on_prompt_tokens():
    tokenizer, trajectories, batch, old = _batch_and_old()
    pool_ids = pool_token_ids(POOL, tokenizer)
    fine, coarse = (Correction(trajectories, pool_ids, probe_share=0.5, failure_rate=0.5,
                               correction=kind)(batch, old) for kind in ("fine", "coarse"))
    prompt = token_roles(batch, trajectories)["prompt"]
    assert torch.equal(fine[~prompt], coarse[~prompt])
    assert not torch.equal(fine[prompt], coarse[prompt])


def test_no_probes_in_the_batch_leaves_the_old_log_probs():
    tokenizer, trajectories, batch, old = _batch_and_old()
    hook = Correction(trajectories[:1], pool_token_ids(POOL, tokenizer), probe_share=0.0,
                      failure_rate=1.0, correction="fine")
    assert torch.equal(hook(batch.rows(0, 1), old[:1, :6]), old[:1, :6])
    assert math.isclose(hook.ratios["policy"], 1.0)


def test_a_smaller_pool_changes_only_the_prompt_tokens_behaviour():
    # the pool-size ablation: the same probe under pools of 2 and 3 prompts; "check again soon"
    # shares two tokens with the inserted prompt, so the 3-pool's shares at positions 1 and 2 fall
    tokenizer, trajectories, batch, old = _batch_and_old()
    two, three = (Correction(trajectories, pool_token_ids(pool, tokenizer), probe_share=0.5,
                             failure_rate=0.5, correction="fine")(batch, old)
                  for pool in (POOL, POOL + ["check again soon"]))
    prompt = token_roles(batch, trajectories)["prompt"]
    assert torch.equal(two[~prompt], three[~prompt])
    # 3-pool μ on the prompt: [1, 2/3, 1/2] → μ_mix = ½·0.1 + ½·μ
    assert three[prompt].exp().tolist() == pytest.approx([0.55, 0.05 + 1 / 3, 0.30])
