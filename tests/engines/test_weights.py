"""``checkpoint_weights``: what every weight push sends (to vLLM and to the transformers
sampling copy) — checkpoint names, LoRA merged like peft's ``merge_and_unload``."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from advrag.engines.weights import checkpoint_weights
from advrag.models.loading import load_policy

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"


@pytest.fixture(scope="module")
def policy(tiny_policy_dir):
    return load_policy(str(tiny_policy_dir))


def adapted(model, dtype=torch.float32):
    """``model`` in ``dtype`` with a LoRA (r=4, alpha=6: scaling 1.5) on every linear layer,
    its B drawn non-zero so the adapter matters; the adapters stay fp32."""
    peft_model = get_peft_model(copy.deepcopy(model).to(dtype),
                                LoraConfig(r=4, lora_alpha=6, target_modules="all-linear"))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, weight in peft_model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.1)
    return peft_model


def test_checkpoint_weights_merge_lora_like_peft_and_leave_the_model_alone(policy):
    """Names are the base checkpoint's; values equal peft's merge_and_unload."""
    peft_model = adapted(policy.model)
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    pushed = dict(checkpoint_weights(peft_model))
    merged = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert pushed.keys() == merged.keys() == policy.model.state_dict().keys()
    for name, tensor in merged.items():
        torch.testing.assert_close(pushed[name], tensor, rtol=0, atol=1e-6)
    assert not torch.equal(pushed[Q_PROJ], policy.model.state_dict()[Q_PROJ])
    as_bf16 = dict(checkpoint_weights(peft_model, dtype=torch.bfloat16))
    assert all(torch.equal(as_bf16[n], t.to(torch.bfloat16)) for n, t in pushed.items())
    after = peft_model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_bf16_base_with_fp32_adapters_merges_through_peft_delta(policy):
    """Base and adapter dtypes differ, so the one-addmm merge does not apply: the merged
    weight is the bf16 base plus peft's fp32 delta, rounded once, as merge_and_unload makes it."""
    peft_model = adapted(policy.model, torch.bfloat16)
    pushed = dict(checkpoint_weights(peft_model))
    merged = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert pushed.keys() == merged.keys()
    assert all(torch.equal(pushed[n], t) for n, t in merged.items())
    assert pushed[Q_PROJ].dtype == torch.bfloat16
