"""Our decoding loop: shared prefix, dropped rows and token choice, against ``model.generate``.

The model is the project's tiny random Llama with its weights redrawn with std 0.3, so greedy
continuations are varied text (wide logit margins) rather than one repeated token.
"""

from __future__ import annotations

import pytest
import torch
from tiny_weights import redraw_matrices

from advrag.agents.search_loop import run_search_agent
from advrag.engines.local.decoding import (
    MIN_SHARED_PREFIX,
    PREFIX_STORE_BYTES,
    PrefixStore,
    choose_tokens,
    decode,
    draw_from,
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


def test_draw_from_follows_the_probabilities_and_never_draws_a_zero():
    """20,000 rows of [0.5, 0.3, 0.2, 0] (one draw a row): shares within 4 standard errors
    (at most 0.0035 each), index 3 never; a one-hot row always gives its index."""
    torch.manual_seed(0)
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).expand(20_000, 4)
    counts = torch.bincount(draw_from(probs), minlength=4) / 20_000
    assert counts[3] == 0
    assert torch.allclose(counts[:3], torch.tensor([0.5, 0.3, 0.2]), atol=0.014)
    one_hot = torch.zeros(50, 7)
    one_hot[:, 6] = 1.0
    assert draw_from(one_hot).tolist() == [6] * 50


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


def test_prefix_store_hands_out_longest_starts_and_drops_them():
    """``take``: the longest stored token prefix (one token left to the prompt), nothing under
    MIN_SHARED_PREFIX, used entries dropped; ``add`` keeps the newest within the budget."""
    def layers(n, fill):
        return [(torch.full((1, 1, n, 2), fill), torch.full((1, 1, n, 2), -fill))]

    store = PrefixStore(budget_bytes=10**6)
    a = list(range(40))
    b = list(range(20)) + [99] * 20
    store.add(a, layers(40, 1.0))
    store.add(b, layers(40, 2.0))
    heads = store.take([a[:30] + [7], b[:25] + [5], a[:40], [5] * 30])
    assert [h.length for h in heads] == [30, 25, 39, 0]
    assert heads[0].layers[0][0].shape == (1, 1, 30, 2)
    assert heads[0].layers[0][0].unique().tolist() == [1.0]
    assert heads[1].layers[0][1].unique().tolist() == [-2.0]
    assert store.take([a]) == [type(heads[3])(0, None)]  # both entries were used
    short = list(range(MIN_SHARED_PREFIX - 1))
    store.add(short, layers(len(short), 3.0))
    assert store.take([short + [1, 2]])[0].layers is None
    tight = PrefixStore(budget_bytes=2 * 2 * 40 * 2 * 4)  # room for two 40-token entries
    for fill in (1.0, 2.0, 3.0):
        tight.add([int(fill)] * 40, layers(40, fill))
    assert tight.nbytes == 2 * 2 * 40 * 2 * 4
    assert [h.length for h in tight.take([[1] * 41, [3] * 41])] == [0, 40]


def count_prefill_tokens(model):
    """A list that collects the real (unpadded) input tokens of every forward over more than
    one position."""
    seen: list[int] = []

    def hook(module, args, kwargs):
        width = kwargs["input_ids"].shape[1]
        if width > 1:
            seen.append(int(kwargs["attention_mask"][:, -width:].sum()))
    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_a_second_turn_prefills_only_its_new_tokens_and_decodes_the_same(policy):
    """Turn two = turn one's prompt, its output and new text: with a store, each row prefills
    its last output token and the new text only (one row a group: no padding), and every
    row's tokens equal ``generate`` on the whole turn-two prompt alone."""
    tok = policy.tokenizer
    first = token_ids(policy, [INSTRUCTIONS + q for q in QUESTIONS])
    store = PrefixStore()
    out = decode(policy.model, first, max_new_tokens=6, pad_id=tok.pad_token_id,
                 eos_ids={tok.eos_token_id}, ignore_eos=True, store=store)
    extra = token_ids(policy, [" The documents say so.", " No.", " Try again with the river.",
                               " Hint: answer now."])
    second = [p + o + e for p, o, e in zip(first, out, extra, strict=True)]
    seen, handle = count_prefill_tokens(policy.model)
    try:
        reused = decode(policy.model, second, max_new_tokens=8, pad_id=tok.pad_token_id,
                        eos_ids={tok.eos_token_id}, prefill_tokens=1, store=store)
    finally:
        handle.remove()
    assert sum(seen) == sum(1 + len(e) for e in extra)
    assert reused == [reference_greedy(policy, p, 8) for p in second]


def test_rows_with_and_without_a_stored_start_decode_together(policy):
    """A batch mixing rows that continue stored sequences, rows that share only the
    instructions and a row with nothing known: all equal ``generate`` alone."""
    tok = policy.tokenizer
    first = token_ids(policy, [INSTRUCTIONS + q for q in QUESTIONS[:2]])
    store = PrefixStore()
    out = decode(policy.model, first, max_new_tokens=5, pad_id=tok.pad_token_id,
                 eos_ids={tok.eos_token_id}, ignore_eos=True, store=store)
    mixed = [first[0] + out[0] + token_ids(policy, [" Next."])[0],
             first[1] + out[1][:2],
             *token_ids(policy, [INSTRUCTIONS + q for q in QUESTIONS[2:]]),
             token_ids(policy, ["Unrelated text"])[0]]
    got = decode(policy.model, mixed, max_new_tokens=7, pad_id=tok.pad_token_id,
                 eos_ids={tok.eos_token_id}, store=store)
    assert got == [reference_greedy(policy, p, 7) for p in mixed]


def test_generator_keeps_turns_within_an_episode_only(policy):
    """Inside ``episode()`` a two-turn exchange gives the same text as without a store, and an
    in-place weight change empties the store; outside it nothing is kept, so a call never
    depends on the calls before it."""
    prompts = [INSTRUCTIONS + q for q in QUESTIONS]
    with_store = HFGenerator(policy.model, policy.tokenizer, batch_size=3)
    without = HFGenerator(policy.model, policy.tokenizer, batch_size=3, prefix_store_bytes=0)
    turn1 = with_store.generate(prompts, max_new_tokens=8)
    assert with_store.prefix_store is None  # outside an episode
    turn2 = [p + t + " Then what?" for p, t in zip(prompts, turn1, strict=True)]
    model = policy.model
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    try:
        with with_store.episode():
            assert with_store.generate(prompts, max_new_tokens=8) == turn1
            assert with_store.prefix_store.nbytes > 0
            with with_store.episode():  # nested: the same store
                assert with_store.generate(turn2, max_new_tokens=8) == without.generate(
                    turn2, max_new_tokens=8)
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.05)
            changed = with_store.generate(turn2, max_new_tokens=8)
            assert changed == without.generate(turn2, max_new_tokens=8)
        assert with_store.prefix_store is None
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(saved[n])


class NoDocuments:
    """A retriever with nothing to return (the tiny model never writes a valid search)."""

    def search(self, queries, k):
        return [[] for _ in queries]


def test_search_agent_reuses_its_turns_and_writes_the_same_episodes(policy):
    """``run_search_agent`` runs its turns in one episode: with the store, calls two and three
    (the tiny model never writes an action, so every row takes both) prefill at most what
    each row's prompt grew by since call one, plus a few tokens a call where text
    re-tokenises at a join; without it they prefill whole prompts. Same trajectories."""
    questions = [q * 3 for q in QUESTIONS]
    tok = policy.tokenizer

    def length(text):
        return len(tok(text, add_special_tokens=False)["input_ids"])

    def episodes(store_bytes):
        generator = HFGenerator(policy.model, tok, prefix_store_bytes=store_bytes)
        calls, generate = [], generator.generate
        seen, handle = count_prefill_tokens(policy.model)
        generator.generate = lambda *a, **k: calls.append(len(seen)) or generate(*a, **k)
        try:
            trajectories = run_search_agent(questions, generator, NoDocuments(), max_turns=2,
                                            max_new_tokens=10)
        finally:
            handle.remove()
        assert generator.prefix_store is None and len(calls) == 3
        assert all(t.n_turns == 3 and t.n_searches == 0 for t in trajectories)
        return trajectories, sum(seen[calls[1]:])

    reused, later_reused = episodes(PREFIX_STORE_BYTES)
    fresh, later_fresh = episodes(0)
    assert [t.text for t in reused] == [t.text for t in fresh]
    join_slack = 3
    grown = sum(length("".join(s.text for s in t.segments[:-1])) - length(t.segments[0].text)
                + 2 * join_slack for t in reused)
    assert later_reused <= grown < later_fresh


def test_the_generator_reports_which_completions_the_budget_cut(policy):
    """A completion that used all ``max_new_tokens`` without a stop string or EOS was cut;
    one that stopped was not; a prompt over the generator's cap is refused, not cut."""
    gen = HFGenerator(policy.model, policy.tokenizer, batch_size=4)
    prompts = [INSTRUCTIONS + q for q in QUESTIONS]
    free = gen.generate(prompts, max_new_tokens=6)
    assert gen.last_cut == [n == 6 for n in gen.last_completion_tokens]
    assert any(gen.last_cut), "the tiny model ended every completion within 6 tokens"
    first_word = next(text.split()[0] for text, cut in zip(free, gen.last_cut) if cut)
    gen.generate(prompts, max_new_tokens=6, stop=[first_word])
    stopped = [first_word in text for text in free]
    assert all(not cut for cut, hit in zip(gen.last_cut, stopped, strict=True) if hit)
    capped = HFGenerator(policy.model, policy.tokenizer, max_prompt_tokens=8)
    with pytest.raises(ValueError, match=r"a prompt of \d+ tokens is longer than the "
                                         r"generator's max_prompt_tokens \(8\)"):
        capped.generate(prompts, max_new_tokens=2)
