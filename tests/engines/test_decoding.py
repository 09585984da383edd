"""Our decoding loop: shared prefix, dropped rows and token choice, against ``model.generate``.

The model is the project's tiny random Llama with its weights redrawn with std 0.3, so greedy
continuations are varied text (wide logit margins) rather than one repeated token.
"""

from __future__ import annotations

import pytest
import torch
from tiny_weights import redraw_matrices

from advrag.engines.local.decoding import (
    MIN_SHARED_PREFIX,
    choose_tokens,
    decode,
    length_groups,
    shared_prefix_length,
)
from advrag.engines.local.generation import HFGenerator, stop_condition
from advrag.models.loading import load_policy

INSTRUCTIONS = "Answer the question about the world in one short line. " * 3
QUESTIONS = ["Zorvath is a city", "The river", "Who founded the company in the north?", "Why?"]


@pytest.fixture(scope="module")
def policy(tiny_policy_dir):
    """The tiny policy with N(0, 0.3) matrices."""
    loaded = load_policy(str(tiny_policy_dir))
    redraw_matrices(loaded.model)
    return loaded


def token_ids(policy, texts):
    return policy.tokenizer(texts, add_special_tokens=False)["input_ids"]


def reference_greedy(policy, prompt: list[int], new_tokens: int) -> list[int]:
    """``model.generate`` on one prompt alone (no padding), up to and including an EOS."""
    tok = policy.tokenizer
    ids = torch.tensor([prompt], device=policy.model.device)
    out = policy.model.generate(ids, attention_mask=torch.ones_like(ids),
                                max_new_tokens=new_tokens, do_sample=False,
                                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return out[0, len(prompt):].tolist()


def test_shared_prefix_length_by_hand():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert shared_prefix_length([[1, 2], [1, 2, 3]]) == 1  # each prompt keeps a token of its own
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_prefix_length([[7, 1], [8, 1]]) == 0


def test_length_groups_by_hand():
    """Longest first; a group grows while rows × its longest fit the budget."""
    assert length_groups([5, 9, 2, 8, 3], budget=18) == [[1, 3], [0, 4, 2]]
    assert length_groups([5, 9], budget=1) == [[1], [0]]  # one row at least


def test_choose_tokens_greedy_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]))
    assert choose_tokens(logits, 0.0, 1.0).tolist() == [0, 2]
    torch.manual_seed(0)
    draws = torch.stack([choose_tokens(logits, 1.0, 0.6) for _ in range(400)])
    # top_p 0.6 keeps {0, 1} in row 0 (0.5 < 0.6 <= 0.8) and {2} in row 1 (0.7 >= 0.6)
    assert set(draws[:, 0].tolist()) == {0, 1}
    assert set(draws[:, 1].tolist()) == {2}
    share = (draws[:, 0] == 0).float().mean().item()
    assert abs(share - 0.5 / 0.8) < 0.08  # renormalised over the kept set


@pytest.mark.parametrize("instructions", ["", INSTRUCTIONS])
@pytest.mark.parametrize("prefill_tokens", [4096, 1])
def test_batched_greedy_equals_generate_one_prompt_at_a_time(policy, instructions,
                                                             prefill_tokens):
    """With and without a shared prefix, prefilled as one group or a row at a time, rows of
    different lengths in one batch: each row's tokens are what ``generate`` gives that prompt
    alone (EOS included where it comes)."""
    prompts = token_ids(policy, [instructions + q for q in QUESTIONS])
    if instructions:
        assert shared_prefix_length(prompts) >= MIN_SHARED_PREFIX  # the shared path runs
    tok = policy.tokenizer
    batched = decode(policy.model, prompts, max_new_tokens=12, pad_id=tok.pad_token_id,
                     eos_ids={tok.eos_token_id}, prefill_tokens=prefill_tokens)
    assert batched == [reference_greedy(policy, p, 12) for p in prompts]


def test_rows_leave_at_their_own_ends(policy):
    """Per-row lengths, a stop condition on one row, and ignore_eos forcing exact lengths."""
    tok = policy.tokenizer
    prompts = token_ids(policy, [INSTRUCTIONS + q for q in QUESTIONS])
    full = decode(policy.model, prompts, max_new_tokens=10, pad_id=tok.pad_token_id,
                  eos_ids={tok.eos_token_id}, ignore_eos=True)
    assert [len(row) for row in full] == [10] * 4
    assert all(tok.eos_token_id not in row for row in full)
    short = decode(policy.model, prompts, max_new_tokens=[3, 10, 1, 0], pad_id=tok.pad_token_id,
                   eos_ids={tok.eos_token_id}, ignore_eos=True)
    assert short == [full[0][:3], full[1], full[2][:1], []]
    marker = full[1][4]
    cut = decode(policy.model, prompts, max_new_tokens=10, pad_id=tok.pad_token_id,
                 eos_ids={tok.eos_token_id}, ignore_eos=True,
                 stopped=lambda ids: ids[-1] == marker)
    first = [row.index(marker) + 1 if marker in row else 10 for row in full]
    assert cut == [row[:n] for row, n in zip(full, first, strict=True)]


def test_sampling_is_reproducible_under_a_seed(policy):
    tok = policy.tokenizer
    prompts = token_ids(policy, [INSTRUCTIONS + q for q in QUESTIONS])

    def sample():
        torch.manual_seed(3)
        return decode(policy.model, prompts, max_new_tokens=8, pad_id=tok.pad_token_id,
                      eos_ids={tok.eos_token_id}, temperature=1.0, top_p=0.9)

    first = sample()
    assert first == sample()
    assert first != decode(policy.model, prompts, max_new_tokens=8, pad_id=tok.pad_token_id,
                           eos_ids={tok.eos_token_id})  # sampled, not greedy


def test_stop_condition_reads_the_tail(policy):
    tok = policy.tokenizer
    stopped = stop_condition(tok, ["</search>", ""])
    ids = token_ids(policy, ["<search>the river of the city</search>"])[0]
    assert stopped(ids) and not stopped(ids[:-1])
    assert stop_condition(tok, []) is None


def test_generator_cuts_text_after_the_stop_string(policy):
    """The generator's text ends at the first stop string its tokens completed."""
    gen = HFGenerator(policy.model, policy.tokenizer, batch_size=4)
    free = gen.generate([INSTRUCTIONS + q for q in QUESTIONS], max_new_tokens=16)
    words = [text.split()[1] for text in free if len(text.split()) > 2]
    assert words, "the tiny model produced no multi-word continuation to stop in"
    stopped = gen.generate([INSTRUCTIONS + q for q in QUESTIONS], max_new_tokens=16,
                           stop=[words[0]])
    for full, cut in zip(free, stopped, strict=True):
        end = full.find(words[0])
        assert cut == (full[:end + len(words[0])] if end >= 0 else full)
