"""ARR fidelity to the paper, pinned by hand: content-only actions, truncated actions,
the Final Predictor's view of τ and the turn limit.

A one-character-per-token tokenizer makes every token position computable by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.arr import (
    REASONER_STOP,
    VERIFIER_FINAL_STOP,
    VERIFIER_STOP,
    render_dialogue,
    run_arr_dialogue,
)
from advrag.agents.arr_scoring import action_clarities, per_turn_means, split_actions
from advrag.agents.prompts import FORCE_ANSWER_HINT, arr_final_predictor_prompt
from advrag.agents.types import Trajectory
from advrag.core.actions import action_means, action_token_ids, excluded_actions
from advrag.core.arr_process import arr_process_advantages
from advrag.core.arr_rewards import clarity, impact
from advrag.core.entropy import entropy_pattern, mean_token_entropy
from advrag.engines.local.tokenize import encode_trajectories

GOLD = ["Paris"]
HAMLET = "Who wrote Hamlet?"
FINAL_KEY = "The rollout text of the reasoner and verifier is:"


class CharTokenizer:
    """One token per character (id = code point), pad id 0."""

    pad_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def _trajectory(*segments: tuple[str, str]) -> Trajectory:
    traj = Trajectory()
    for text, source in segments:
        traj.add(text, source)
    return traj


# --- 1. an action is its content, not its tag markup ---------------------------------------

VERIFIER = _trajectory(("Q", "prompt"), ("<verify>ab</verify>x<response>cde</response>", "policy"))


def test_split_actions_keeps_markup_outside_the_actions():
    split = split_actions(VERIFIER, ["verify", "response"])
    pieces = [(s.text, s.source, a) for s, a in zip(split.trajectory.segments,
                                                    split.segment_action)]
    assert pieces == [("Q", "prompt", -1), ("<verify>", "policy", -1), ("ab", "policy", 0),
                      ("</verify>x<response>", "policy", -1), ("cde", "policy", 1),
                      ("</response>", "policy", -1)]
    assert split.trajectory.text == VERIFIER.text


def test_entropy_mean_and_process_advantage_cover_only_content_tokens():
    split = split_actions(VERIFIER, ["verify", "response"])
    batch = encode_trajectories([split.trajectory], CharTokenizer(), max_len=100)
    ids = action_token_ids(batch.segment_ids, [split.segment_action])
    # chars: Q | <verify> (1..8) | ab (9, 10) | </verify>x<response> (11..30) | cde (31..33)
    # | </response> (34..44)
    expected_ids = [-1] * 9 + [0, 0] + [-1] * 20 + [1, 1, 1] + [-1] * 11
    assert ids[0].tolist() == expected_ids
    assert batch.loss_mask[0].tolist() == [False] + [True] * 44  # markup is still policy
    entropy = torch.full((1, 45), 5.0)  # markup tokens: 5.0
    entropy[0, 9:11] = torch.tensor([0.2, 0.4])
    entropy[0, 31:34] = torch.tensor([1.0, 2.0, 3.0])
    # H̄: verify (0.2 + 0.4)/2 = 0.3; response (1 + 2 + 3)/3 = 2.0 (markup 5.0 ignored;
    # with it verify would be (8·5 + 0.2 + 0.4 + 9·5)/19)
    means = action_means(entropy, ids, 2)
    assert torch.allclose(means, torch.tensor([[0.3, 2.0]]))
    # eq. 7 with the gold in the step's docs: verify drops it (−e^−0.3), response keeps it
    # (+e^−2); the gold flags are given by hand, the text check is tested below
    in_docs, in_action = torch.tensor([[True, True]]), torch.tensor([[False, True]])
    base = torch.where(batch.loss_mask, 0.5, 0.0)
    term = arr_process_advantages(base, entropy, ids, batch.loss_mask, in_docs, in_action,
                                  torch.tensor([1.0]), torch.tensor([0.8]))
    c_verify, c_response = -math.exp(-0.3), math.exp(-2.0)
    assert torch.allclose(term.clarity, torch.tensor([[c_verify, c_response]]))
    # eq. 9: A_proc = 1·c·0.8 on the content tokens only; markup keeps the outcome 0.5
    expected = base.clone()
    expected[0, 9:11] += 0.8 * c_verify
    expected[0, 31:34] += 0.8 * c_response
    assert torch.allclose(term.advantages, expected)
    assert term.advantages[0, 1:9].eq(0.5).all() and term.advantages[0, 34:].eq(0.5).all()


def test_scalar_clarities_match_on_content_only_actions():
    split = split_actions(_trajectory(("Q", "prompt"), ("<verify>no</verify><response>"
                                                        "Paris</response>", "policy")),
                          ["verify", "response"])
    # the action texts are the contents; the docs of message 0 hold the gold
    assert [a.text for a in split.actions] == ["no", "Paris"]
    values = action_clarities(split.actions, [0.3, 2.0], [["Paris is in France."]], GOLD)
    assert values == pytest.approx([-math.exp(-0.3), math.exp(-2.0)])


def test_empty_tag_is_no_action():
    split = split_actions(_trajectory(("<think></think><think>x</think>", "policy")), ["think"])
    assert [a.text for a in split.actions] == ["x"]
    assert split.segment_action == [-1, 0, -1]  # "<think></think><think>", "x", "</think>"


# --- 2. actions cut by max_seq_len are excluded, never 0.0 ---------------------------------

# prompt "Q" (1 char), then per turn: policy "<think>" (7) + 2 content chars +
# "</think><search>s</search>" (26) = 35 chars, env "<f>" (3) → 38 chars per turn.
# Turn k's think content sits at 1 + 38k + 7 = 8 + 38k and 9 + 38k: 8–9, 46–47, 84–85.
REASONER = _trajectory(("Q", "prompt"), *[
    piece for k in range(3)
    for piece in ((f"<think>t{k}</think><search>s</search>", "policy"), ("<f>", "env"))])


def _reasoner_batch(max_len: int):
    split = split_actions(REASONER, ["think"])
    batch = encode_trajectories([split.trajectory], CharTokenizer(), max_len=max_len)
    return split, batch, action_token_ids(batch.segment_ids, [split.segment_action])


def test_truncated_think_is_left_out_of_the_trend_and_counted():
    split, batch, ids = _reasoner_batch(max_len=84)  # keeps 0..83: turn 2's "<think>", not "t2"
    assert bool(batch.truncated_mask[0])
    assert [int((ids[0] == k).sum()) for k in range(3)] == [2, 2, 0]
    entropy = torch.full(ids.shape, 9.0)
    entropy[0, 8:10] = torch.tensor([0.5, 1.5])  # turn 0: mean 1.0
    entropy[0, 46:48] = torch.tensor([0.9, 1.1])  # turn 1: mean 1.0
    means = action_means(entropy, ids, 3)
    assert means[0, :2].tolist() == pytest.approx([1.0, 1.0]) and math.isnan(means[0, 2])
    per_turn = per_turn_means(split.actions, means[0].tolist(), "think")
    assert per_turn == pytest.approx({0: 1.0, 1: 1.0})  # turn 2 absent, not 0.0
    # trend [1.0, 1.0] is flat → F, impact 0.6; reading the cut turn as 0.0 would have given
    # [1.0, 1.0, 0.0] → D, impact 1.0
    assert entropy_pattern(list(per_turn.values()), 0.1) == "F"
    assert impact(list(per_turn.values()), 0.1) == 0.6
    assert excluded_actions(ids, [3]).tolist() == [1]


def test_untruncated_trajectory_excludes_nothing():
    _, batch, ids = _reasoner_batch(max_len=200)
    assert not bool(batch.truncated_mask[0])
    assert [int((ids[0] == k).sum()) for k in range(3)] == [2, 2, 2]
    assert excluded_actions(ids, [3]).tolist() == [0]


def test_excluded_actions_counts_each_row_own_actions_only():
    # row 0: actions 0, 1 kept, action 2 cut; row 1: its one action kept (columns 1, 2 are
    # not its actions and do not count)
    ids = torch.tensor([[-1, 0, 1, -1], [-1, 0, -1, -1]])
    assert excluded_actions(ids, [3, 1]).tolist() == [1, 0]
    assert excluded_actions(ids, [2, 2]).tolist() == [0, 1]
    with pytest.raises(ValueError):
        excluded_actions(ids, [3])


def test_truncated_verifier_action_has_no_clarity():
    # H̄ NaN: no clarity whatever the documents say (not 0, which reads "retrieval failed")
    assert math.isnan(clarity(math.nan, gold_in_docs=True, gold_in_action=False))
    assert math.isnan(clarity(math.nan, gold_in_docs=False, gold_in_action=False))
    split = split_actions(_trajectory(("<response>Paris</response>", "policy")), ["response"])
    (value,) = action_clarities(split.actions, [math.nan], [["Paris"]], GOLD)
    assert math.isnan(value)


def test_nan_never_enters_a_trend_silently():
    assert math.isnan(mean_token_entropy(torch.tensor([0.7]), torch.tensor([False])).item())
    with pytest.raises(ValueError, match="NaN"):
        entropy_pattern([1.0, math.nan, 0.5], 0.1)


# --- 3. the Final Predictor reads the whole dialogue τ -------------------------------------

R_SEARCH = "<think>Need the author.</think><search>Hamlet author</search>"
R_ANSWER = "<think>So Shakespeare.</think><answer>William Shakespeare</answer>"
V_SELECT = "<verify>Good.</verify><selected_doc>Doc 1</selected_doc><response>Shakespeare.</response>"
V_FINAL = "<verify>Supported.</verify><final_answer>William Shakespeare</final_answer>"


def test_final_predictor_reads_every_message_and_all_retrieved_documents():
    reasoner = ScriptedGenerator({FINAL_KEY: "<answer>William Shakespeare</answer>",
                                  "</feedback>\n\n": R_ANSWER, f"Question: {HAMLET}": R_SEARCH})
    verifier = ScriptedGenerator({"</answer></information>": V_FINAL,
                                  "<search>Hamlet author</search>": V_SELECT})
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS), max_turns=3)
    # "Hamlet author" overlaps p1 in one word and the rest in none: top-3 = p1, p2, p3
    docs = ("Doc 1(Title: Hamlet) Hamlet is a tragedy written by William Shakespeare.\n"
            "Doc 2(Title: Paris) Paris is the capital and largest city of France.\n"
            "Doc 3(Title: Everest) Mount Everest is the highest mountain above sea level.")
    transcript = "\n".join([
        f"Reasoner: {R_SEARCH}",
        f"Search results: {docs}",  # all three, not only the verifier's pick
        f"Verifier: {V_SELECT}",
        "Selected document: Doc 1(Title: Hamlet) Hamlet is a tragedy written by William "
        "Shakespeare.",
        f"Reasoner: {R_ANSWER}",
        f"Verifier: {V_FINAL}",
    ])
    assert render_dialogue(d.messages) == transcript
    expected = reasoner.chat_prompt(arr_final_predictor_prompt(HAMLET, transcript))
    assert reasoner.calls[-1] == [expected] and d.final.segments[0].text == expected


# --- 4. max_turns counts reasoner messages, the forced answer included ---------------------

def _always_searching():
    reasoner = ScriptedGenerator({FINAL_KEY: "<answer>x</answer>",
                                  "No more searches are allowed": "<answer>forced</answer>"},
                                 default="<search>Hamlet author</search>")
    verifier = ScriptedGenerator({"</answer></information>": V_FINAL}, default=V_SELECT)
    return reasoner, verifier


@pytest.mark.parametrize(("max_turns", "searches"), [(1, 0), (2, 1), (3, 2)])
def test_reasoner_speaks_at_most_max_turns_times(max_turns, searches):
    reasoner, verifier = _always_searching()
    retriever = KeywordRetriever(CORPUS)
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, retriever, max_turns=max_turns)
    # T reasoner messages: T − 1 searches, then the forced answer (the T-th), then the Final
    # Predictor (a separate trajectory)
    assert d.reasoner.n_turns == max_turns
    assert sum(s == "Reasoner" for s, _ in d.messages) == max_turns
    assert reasoner.stops == [REASONER_STOP] * searches + [("</answer>",), ("</answer>",)]
    assert len(retriever.calls) == d.reasoner.n_searches == len(d.steps) == searches
    assert d.reasoner_answer == "forced" and FORCE_ANSWER_HINT in d.reasoner.text
    # the verifier: one message per search step, then the final verification
    assert verifier.stops == [VERIFIER_STOP] * searches + [VERIFIER_FINAL_STOP]
    assert d.verifier.n_turns == searches + 1


def test_answer_before_the_limit_is_not_forced():
    reasoner = ScriptedGenerator({FINAL_KEY: "<answer>x</answer>",
                                  "</feedback>\n\n": R_ANSWER}, default=R_SEARCH)
    verifier = ScriptedGenerator({"</answer></information>": V_FINAL}, default=V_SELECT)
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS), max_turns=3)
    # turn 1 searches, turn 2 answers freely: two messages, no hint
    assert d.reasoner.n_turns == 2 and FORCE_ANSWER_HINT not in d.reasoner.text
    assert d.reasoner_answer == "William Shakespeare"


def test_max_turns_below_one_is_rejected():
    reasoner, verifier = _always_searching()
    with pytest.raises(ValueError, match="max_turns"):
        run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS), max_turns=0)
