"""P(yes) at the discriminator's verdict: the tokenisation, a hand computation, batching, scores."""

from __future__ import annotations

import math

import pytest
import torch

from advrag.agents.types import Trajectory
from advrag.engines.local.dual import shared_lora_policies
from advrag.engines.local.policy import LoraSettings
from advrag.engines.local.verdicts import (
    judgment_loss,
    judgment_metrics,
    verdict_context,
    verdict_probabilities,
    verdict_tokens,
)
from advrag.models.loading import load_policy

PROMPT = "<|im_start|>user\nIs the slice sound?<|im_end|>\n<|im_start|>assistant\n"
OUTPUTS = ["Analysis: The slice names Tarn.\nVerdict: yes\nRationale: fine.",
           "Analysis: It is wrong.\nVerdict: no",
           "Analysis: cut off before the",
           "Verdict:"]


@pytest.fixture(scope="module")
def judge(tiny_policy_dir):
    """The tiny Llama with a LoRA adapter "discriminator" whose B weights are not zero."""
    loaded = load_policy(str(tiny_policy_dir), dtype="float32")
    policy = shared_lora_policies(loaded.model, LoraSettings(r=4, alpha=8),
                                  names=("discriminator", "other"))["discriminator"]
    torch.manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.normal_(0, 0.5)  # a fresh adapter is the identity: make it count
    return policy, loaded.tokenizer


def test_the_tiny_tokenizer_compares_y_with_n_after_a_shared_space(judge):
    _, tok = judge
    shared, yes, no = verdict_tokens(tok)
    assert tok.decode(shared) == " " and (tok.decode([yes]), tok.decode([no])) == ("y", "n")
    # the context tokenises "Verdict:" exactly as the whole SFT target does, then the space
    whole = tok("Verdict: yes", add_special_tokens=False).input_ids
    assert verdict_context(tok, "", "Verdict: yes", shared) == whole[:len(whole) - 2]


@pytest.mark.slow
def test_smollm2_compares_its_single_yes_and_no_tokens():
    from transformers import AutoTokenizer

    from advrag.models.loading import resolve_model_dir

    tok = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2"))
    assert verdict_tokens(tok) == ([], 9805, 787)  # " yes", " no"
    whole = tok("Analysis: a.\nVerdict: no", add_special_tokens=False).input_ids
    assert verdict_context(tok, "", "Analysis: a.\nVerdict: no", []) == whole[:-1]


def test_p_yes_is_a_probability_and_none_without_a_verdict(judge):
    policy, tok = judge
    probs = verdict_probabilities(policy, tok, [PROMPT] * 4, OUTPUTS)
    assert probs[2] is None
    assert all(0.0 <= p <= 1.0 for p in (probs[0], probs[1], probs[3]))
    flipped = OUTPUTS[0].replace("yes\nRationale: fine.", "no\nRationale: bad.")
    (same,) = verdict_probabilities(policy, tok, [PROMPT], [flipped])
    assert same == pytest.approx(probs[0], abs=1e-6)  # what follows "Verdict:" is not read


def test_p_yes_equals_the_hand_computation_from_the_logits(judge):
    policy, tok = judge
    shared, yes, no = verdict_tokens(tok)
    ids = (tok(PROMPT, add_special_tokens=False).input_ids
           + tok("Analysis: It is wrong.\nVerdict:", add_special_tokens=False).input_ids + shared)
    policy.activate()
    with torch.no_grad():
        logits = policy.model(torch.tensor([ids])).logits[0, -1]
    p = torch.softmax(logits, dim=-1)
    expected = float(p[yes] / (p[yes] + p[no]))  # renormalised over the two verdict tokens
    (got,) = verdict_probabilities(policy, tok, [PROMPT], [OUTPUTS[1]])
    assert got == pytest.approx(expected, abs=1e-5)


def test_batching_changes_nothing_and_the_own_adapter_is_used(judge):
    policy, tok = judge
    alone = [verdict_probabilities(policy, tok, [PROMPT], [o])[0] for o in OUTPUTS]
    together = verdict_probabilities(policy, tok, [PROMPT] * 4, OUTPUTS, batch_size=3)
    assert [p is None for p in together] == [p is None for p in alone] == [False, False, True, False]
    assert [p for p in together if p is not None] == pytest.approx(
        [p for p in alone if p is not None], abs=1e-5)
    policy.model.set_adapter("other")  # another agent sampled last: ours is activated again
    assert verdict_probabilities(policy, tok, [PROMPT], [OUTPUTS[0]])[0] == pytest.approx(alone[0])
    with policy.model.disable_adapter():
        base = verdict_probabilities(policy, tok, [PROMPT], [OUTPUTS[0]])[0]
    assert base != pytest.approx(alone[0], abs=1e-4)


def test_judgment_loss_is_the_mean_nll_of_the_judgment_tokens(judge):
    policy, tok = judge
    traj = Trajectory()
    traj.add(PROMPT, "prompt")
    traj.add(OUTPUTS[1], "policy")
    loss = judgment_loss(policy, tok, [traj, traj], max_len=512, micro_batch_size=1)
    assert loss == pytest.approx(judgment_loss(policy, tok, [traj], max_len=512, micro_batch_size=1))
    assert 0 < loss < 20


def test_judgment_metrics_count_malformed_outputs_as_wrong():
    sound = [True, True, False, False]
    metrics = judgment_metrics(sound, [True, None, False, True], [0.9, None, 0.2, 0.6])
    assert metrics["accuracy"] == 0.5 and metrics["malformed"] == 1.0
    # yes: precision 1/2, recall 1/2 → F1 1/2; no: precision 1, recall 1/2 → F1 2/3
    assert metrics["f1"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert metrics["auroc"] == 1.0  # 0.9 (sound) above 0.2 and 0.6 (unsound)
    # every output ranked, the unread one at 0.5: sound (0.9, 0.5) against unsound (0.2, 0.6):
    # pairs won 0.9>0.2, 0.9>0.6, 0.5>0.2; lost 0.5<0.6 → 3/4
    assert metrics["auroc_all"] == 0.75
    # P(yes) ≥ 0.5: 0.9 right, None wrong, 0.2 right, 0.6 wrong → 2/4
    assert metrics["p_yes_accuracy"] == 0.5
    assert judgment_metrics([True, False], [None, None], [0.5, 0.4])["p_yes_accuracy"] == 1.0
    assert math.isnan(judgment_metrics([True], [True], [0.7])["auroc"])  # one label: undefined
    assert math.isnan(judgment_metrics([True], [True], [0.7])["auroc_all"])
    assert math.isnan(judgment_metrics([False, False], [False, True], [0.1, 0.8])["f1"])


def test_judged_in_chunks_gives_what_one_call_gives(judge):
    from advrag.engines.local.dual import agent_generator
    from advrag.tasks.discriminator import judged

    policy, tok = judge
    generator = agent_generator(policy, tok, temperature=0.0, batch_size=2)
    prompts = [PROMPT.replace("sound", f"sound ({i})") for i in range(5)]
    whole = generator.generate(prompts, max_new_tokens=6)
    outputs, p_yes = judged(generator, policy, tok, prompts, 6, chunk=2)
    assert outputs == whole
    assert p_yes == verdict_probabilities(policy, tok, prompts, whole)
