"""The transformers generator: stop handling, batching, chat rendering, dtype choice."""

from __future__ import annotations

import torch

from advrag.engines.local.generation import HFGenerator, cut_at_stop, pick_dtype
from advrag.models.loading import load_policy


def test_cut_at_stop_keeps_the_earliest_stop_string():
    text = "<think>x</think><search>q</search> more <answer>a</answer>"
    assert cut_at_stop(text, ["</answer>", "</search>"]) == "<think>x</think><search>q</search>"
    assert cut_at_stop(text, []) == text
    assert cut_at_stop("no stop here", ["</answer>"]) == "no stop here"


def test_pick_dtype_passes_explicit_choices_through():
    assert pick_dtype("float32") == "float32"
    assert pick_dtype("bfloat16") == "bfloat16"
    assert pick_dtype("auto") in {"float32", "bfloat16"}


def test_chat_prompt_uses_the_chatml_template(tiny_policy_dir):
    policy = load_policy(str(tiny_policy_dir))
    gen = HFGenerator(policy.model, policy.tokenizer)
    prompt = gen.chat_prompt("Who?", system="Be brief.")
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                      "<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\n")


def test_batched_greedy_equals_one_at_a_time(tiny_policy_dir):
    """Left padding must not change greedy continuations."""
    policy = load_policy(str(tiny_policy_dir))
    prompts = ["Zorvath is a city", "The river", "Question: who founded the company in the north?"]
    batched = HFGenerator(policy.model, policy.tokenizer, batch_size=3)
    single = HFGenerator(policy.model, policy.tokenizer, batch_size=1)
    torch.manual_seed(0)
    out_batched = batched.generate(prompts, max_new_tokens=8)
    out_single = single.generate(prompts, max_new_tokens=8)
    assert out_batched == out_single
    assert len(out_batched) == 3 and batched.generated_tokens > 0
