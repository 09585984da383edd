"""ARR training pieces: action spans, critique-token masks, dialogue rewards, entropy → impact.

Bucket edges of ``bin`` and the winner's bonus both ways are pinned in
``test_arr_rewards.py``; here they are checked through whole dialogues.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.arr import Dialogue, RetrievalStep, run_arr_dialogue
from advrag.agents.arr_scoring import (
    ActionSpan,
    SplitTrajectory,
    per_turn_means,
    score_dialogue,
    split_actions,
    verifier_checks,
    verifier_turn_docs,
)
from advrag.agents.types import Trajectory
from advrag.config import load_config
from advrag.core.actions import action_means, action_token_ids
from advrag.core.arr_process import arr_process_advantages
from advrag.core.arr_rewards import bin_value, gold_in_text, impact
from advrag.core.entropy import entropy_pattern
from advrag.datasets.records import QARecord
from advrag.engines.local.tokenize import encode_trajectories
from advrag.engines.local.trainer import UpdateInputs
from advrag.recipes.arr import ArrConfig
from advrag.recipes.arr.step import score, verifier_update

HAMLET = "Who wrote Hamlet?"
GOLD = ["William Shakespeare"]
FINAL_KEY = "The rollout text of the reasoner and verifier is:"
R_SEARCH = "<think>Need the author.</think><search>Hamlet author</search>"
R_ANSWER = "<verify>Doc 1 answers it.</verify><think>So Shakespeare.</think><answer>William Shakespeare</answer>"
V_VERIFY = "<verify>Good query.</verify>"
V_RESPONSE = "<response>Hamlet was written by William Shakespeare.</response>"
V_STEP = V_VERIFY + "<selected_doc>Doc 1</selected_doc>" + V_RESPONSE
V_FINAL_VERIFY = "<verify>Supported by Doc 1.</verify>"
V_FINAL = V_FINAL_VERIFY + "<final_answer>Shakespeare</final_answer>"


def hamlet_dialogue(verifier_step: str = V_STEP, verifier_final: str = V_FINAL) -> Dialogue:
    """One scripted dialogue: search → verifier step → answer → final check → final predictor."""
    reasoner = ScriptedGenerator({FINAL_KEY: "<answer>Shakespeare</answer>",
                                  "</feedback>\n\n": R_ANSWER, f"Question: {HAMLET}": R_SEARCH})
    verifier = ScriptedGenerator({"</answer></information>": verifier_final,
                                  "<search>Hamlet author</search>": verifier_step})
    (dialogue,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS))
    return dialogue


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_dir)


def test_split_actions_cuts_policy_segments_at_the_named_tags():
    d = hamlet_dialogue()
    split = split_actions(d.verifier, ["verify", "response"])
    assert split.trajectory.text == d.verifier.text  # same text, more segments
    assert split.actions == [
        ActionSpan(0, "verify", "Good query."),
        ActionSpan(0, "response", "Hamlet was written by William Shakespeare."),
        ActionSpan(1, "verify", "Supported by Doc 1."),
    ]
    policy = [(s.text, a) for s, a in zip(split.trajectory.segments, split.segment_action)
              if s.source == "policy"]
    # each action is its tag's content; the markup stays policy text outside the actions
    assert policy == [
        ("<verify>", -1), ("Good query.", 0),
        ("</verify><selected_doc>Doc 1</selected_doc><response>", -1),
        ("Hamlet was written by William Shakespeare.", 1), ("</response>", -1),
        ("<verify>", -1), ("Supported by Doc 1.", 2),
        ("</verify><final_answer>Shakespeare</final_answer>", -1)]
    # non-policy segments (prompt, information, the reasoner's words) are untouched
    assert [s for s in split.trajectory.segments if s.source != "policy"] == [
        s for s in d.verifier.segments if s.source != "policy"]


def _gold_flags(split: SplitTrajectory, dialogue: Dialogue) -> tuple[torch.Tensor, ...]:
    """Per critique action: gold in its step's documents, gold in its content; ``(1, A)``."""
    docs = verifier_turn_docs(dialogue)
    in_docs = [gold_in_text(GOLD, list(docs[a.turn])) for a in split.actions]
    in_action = [gold_in_text(GOLD, a.text) for a in split.actions]
    return torch.tensor([in_docs]), torch.tensor([in_action])


def test_process_advantage_touches_exactly_the_critique_tokens(tokenizer):
    d = hamlet_dialogue()
    split = split_actions(d.verifier, ["verify", "response"])
    batch = encode_trajectories([split.trajectory], tokenizer, max_len=4096)
    ids = action_token_ids(batch.segment_ids, [split.segment_action])
    row = batch.input_ids[0]
    contents = ["Good query.", "Hamlet was written by William Shakespeare.", "Supported by Doc 1."]
    for k, content in enumerate(contents):
        assert tokenizer.decode(row[ids[0] == k]) == content
    outside = batch.loss_mask[0] & (ids[0] < 0)
    assert tokenizer.decode(row[outside]) == (
        "<verify></verify><selected_doc>Doc 1</selected_doc><response></response>"
        "<verify></verify><final_answer>Shakespeare</final_answer>")
    assert not (ids[0] >= 0)[~batch.loss_mask[0]].any()  # critique ⊆ the verifier's own tokens

    base = torch.where(batch.loss_mask, 0.3, 0.0)
    in_docs, in_action = _gold_flags(split, d)
    term = arr_process_advantages(base, torch.full(row.shape, 0.5)[None], ids, batch.loss_mask,
                                  in_docs, in_action, torch.tensor([1.0]), torch.tensor([0.8]))
    e = math.exp(-0.5)
    # clarity: step 0's documents hold the gold; "Good query." drops it → −e, the response
    # keeps it → +e; the final check has no documents → 0. A_proc = F1_r·clarity·impact.
    assert term.clarity[0].tolist() == pytest.approx([-e, e, 0.0])
    expected = base.clone()
    expected[ids == 0] += 1.0 * -e * 0.8
    expected[ids == 1] += 1.0 * e * 0.8
    assert torch.allclose(term.advantages, expected, atol=1e-7, rtol=0)
    assert torch.equal(term.advantages != base, (ids == 0) | (ids == 1))


def test_wrong_reasoner_answer_gives_no_process_credit(tokenizer):
    d = hamlet_dialogue()
    split = split_actions(d.verifier, ["verify", "response"])
    batch = encode_trajectories([split.trajectory], tokenizer, max_len=4096)
    ids = action_token_ids(batch.segment_ids, [split.segment_action])
    base = torch.where(batch.loss_mask, -0.7, 0.0)
    term = arr_process_advantages(base, torch.zeros(batch.input_ids.shape), ids, batch.loss_mask,
                                  *_gold_flags(split, d), torch.tensor([0.0]), torch.tensor([1.0]))
    assert torch.equal(term.advantages, base)


def test_score_dialogue_rewards_both_agents_and_the_ablation():
    d = hamlet_dialogue()
    s = score_dialogue(d, GOLD, lam=0.5, n_bins=10, format_penalty=0.2)
    # y_r "William Shakespeare": F1 1; y_v "Shakespeare": P 1, R 1/2 → F1 2/3
    assert (s.f1_reasoner, s.f1_verifier, s.f1_final) == pytest.approx((1.0, 2 / 3, 2 / 3))
    assert (s.em_reasoner, s.em_verifier, s.em_final) == (1.0, 0.0, 0.0)
    # reasoner: 1 + 0.5·bin(1/3) = 1 + 0.5·0.3; verifier: 2/3 + 0.5·max(bin(−1/3), 0) = 2/3
    assert s.reward_reasoner == pytest.approx(1.15)
    assert s.reward_verifier == pytest.approx(2 / 3)
    plain = score_dialogue(d, GOLD, lam=0.5, n_bins=10, adversarial=False)
    assert (plain.reward_reasoner, plain.reward_verifier) == pytest.approx((1.0, 2 / 3))


def test_verifier_checks_count_flags_corrections_and_confirmations():
    def dialogue(reasoner: str | None, verifier: str | None) -> Dialogue:
        d = Dialogue("Who wrote Hamlet?")
        d.reasoner.answer, d.verifier.answer = reasoner, verifier
        return d

    cases = [dialogue("Marlowe", "William Shakespeare"),  # wrong, flagged and corrected
             dialogue("Marlowe", "Bacon"),                # wrong, flagged, not corrected
             dialogue("Marlowe", "marlowe"),              # wrong, kept (EM-equal): not flagged
             dialogue(None, None),                        # no answer on either side: not flagged
             dialogue("William Shakespeare", "William Shakespeare"),  # right, confirmed
             dialogue("William Shakespeare", None)]       # right, not confirmed
    scores = [score_dialogue(d, GOLD, lam=0.5, n_bins=10) for d in cases]
    checks = verifier_checks(cases, scores)
    assert checks == {"n_wrong": 4.0, "n_right": 2.0, "flagged_wrong": 2 / 4,
                      "corrected_wrong": 1 / 4, "confirmed_right": 1 / 2}
    only_right = verifier_checks(cases[4:], scores[4:])
    assert "flagged_wrong" not in only_right and only_right["confirmed_right"] == 0.5


def test_verifier_beating_the_reasoner_earns_the_bonus_and_broken_grammar_is_penalised():
    # the verifier answers in full, the reasoner's answer was "Shakespeare"
    d = hamlet_dialogue(verifier_final="<verify>x<final_answer>William Shakespeare</final_answer>")
    d.reasoner.answer = "Shakespeare"
    s = score_dialogue(d, GOLD, lam=0.5, n_bins=10, format_penalty=0.2)
    # verifier: unclosed <verify> is a format error → 1 + 0.5·0.3 − 0.2; reasoner: 2/3
    assert d.verifier.format_errors == 1
    assert s.reward_verifier == pytest.approx(0.95)
    assert s.reward_reasoner == pytest.approx(2 / 3)


@pytest.mark.parametrize(("text", "actions"), [
    ("", []),
    ("no tags at all", []),
    ("<verify>unclosed to the end", [("verify", "unclosed to the end")]),
    ("<response><verify>nested</verify> outer</response>", [("response", "<verify>nested</verify> outer")]),
    ("</response> stray <Verify >odd</verify>", [("verify", "odd")]),
    ("<verify></verify><response> </response>", [("response", "")]),  # empty content: no action
    ("<response>a</response><response>b", [("response", "a"), ("response", "b")]),
])
def test_split_actions_survives_broken_grammar(text, actions):
    traj = Trajectory()
    traj.add("prompt ", "prompt")
    traj.add(text, "policy")
    split = split_actions(traj, ("verify", "response"))
    assert split.trajectory.text == traj.text
    assert [(a.name, a.text) for a in split.actions] == actions
    assert sorted(a for a in split.segment_action if a >= 0) == list(range(len(actions)))


def test_verifier_turn_docs_skips_empty_messages_and_rejects_foreign_dialogues():
    d = hamlet_dialogue(verifier_step="")  # the verifier said nothing at the search step
    assert len(d.steps) == 1 and d.steps[0].verifier_output == ""
    assert verifier_turn_docs(d) == [[]]  # only the final check is a message
    full = hamlet_dialogue()
    assert verifier_turn_docs(full) == [full.steps[0].doc_texts, []]
    foreign = Dialogue("q")
    for text in ("a", "b", "c"):
        foreign.verifier.add(text, "policy")
    foreign.steps.append(RetrievalStep(0, "q", ["p1"], ["doc"], None, "a"))
    with pytest.raises(ValueError, match="run_arr_dialogue"):
        verifier_turn_docs(foreign)


def test_action_token_ids_and_means_by_hand():
    segment_ids = torch.tensor([[0, 0, 1, 1, 2, -1], [0, 1, 1, 2, 3, 3]])
    ids = action_token_ids(segment_ids, [[-1, 0, -1], [-1, 1, -1, 0]])
    assert ids.tolist() == [[-1, -1, 0, 0, -1, -1], [-1, 1, 1, -1, 0, 0]]
    values = torch.tensor([[9.0, 9.0, 1.0, 3.0, float("nan"), 0.0], [9.0, 4.0, 6.0, 9.0, 2.0, 2.0]])
    # row 0: action 0 = mean(1, 3) = 2, action 1 has no tokens → NaN (no mean, not 0);
    # row 1: (2, 2) and (4, 6)
    means = action_means(values, ids, 2)
    assert math.isnan(means[0, 1])
    assert [means[0, 0].item(), *means[1].tolist()] == [2.0, 2.0, 5.0]


def _reasoner_with_thinks(n: int) -> Trajectory:
    traj = Trajectory()
    traj.add("<|im_start|>user\nQ<|im_end|>\n", "prompt")
    for turn in range(n):
        traj.add(f"<think>step {turn}</think><search>q{turn}</search>", "policy")
        traj.add("<feedback>doc</feedback>", "env")
    return traj


@pytest.mark.parametrize(("values", "pattern", "score"), [
    ([3.0, 2.0, 1.0], "D", 1.0), ([1.0, 2.0, 1.0], "ID", 0.8), ([1.0, 1.0625, 1.0], "F", 0.6),
    ([2.0, 1.0, 2.0], "DI", 0.4), ([1.0, 2.0, 3.0], "I", 0.2),
])
def test_think_entropy_per_turn_gives_impact(tokenizer, values, pattern, score):
    split = split_actions(_reasoner_with_thinks(3), ["think"])
    batch = encode_trajectories([split.trajectory], tokenizer, max_len=4096)
    ids = action_token_ids(batch.segment_ids, [split.segment_action])
    entropy = torch.full(ids.shape, 7.0)  # markup and everything else: 7.0, never averaged in
    for k, value in enumerate(values):
        entropy[ids == k] = value  # action k is turn k's think content
    means = action_means(entropy, ids, len(split.actions))
    per_turn = per_turn_means(split.actions, means[0].tolist(), "think")
    assert per_turn == dict(enumerate(values))
    assert entropy_pattern(list(per_turn.values()), 0.1) == pattern
    assert impact(list(per_turn.values()), 0.1) == score


def test_per_turn_means_averages_actions_of_a_turn():
    actions = [ActionSpan(0, "think", ""), ActionSpan(0, "search", ""), ActionSpan(0, "think", ""),
               ActionSpan(2, "think", "")]
    assert per_turn_means(actions, [1.0, 5.0, 2.0, 4.0], "think") == {0: 1.5, 2: 4.0}


def test_ablation_configs_differ_from_the_recipe_only_in_their_switch_and_names():
    base = load_config("configs/arr.yaml", ArrConfig).model_dump()
    names = {"checkpoint_dir", "registered_reasoner", "registered_verifier"}
    for path, switch in (("configs/arr-no-adv.yaml", "adversarial_reward"),
                         ("configs/arr-no-proc.yaml", "process_advantage")):
        ablation = load_config(path, ArrConfig).model_dump()
        changed = {k for k in base if base[k] != ablation[k]}
        assert changed == {switch} | names and ablation[switch] is False
    assert base == ArrConfig().model_dump()  # the defaults are the CPU recipe


def test_w_o_adv_out_changes_only_the_winners_bonus_of_the_step():
    # the reasoner (F1 1) beats the verifier (F1 2/3): bonus λ·bin(1/3) in arr.yaml, none without
    d = hamlet_dialogue()
    main, ablation = (load_config(path, ArrConfig) for path in
                      ("configs/arr.yaml", "configs/arr-no-adv.yaml"))
    record = QARecord("q", HAMLET, GOLD)
    (with_bonus,), (without,) = (score([d], [record], config) for config in (main, ablation))
    assert with_bonus.reward_reasoner - without.reward_reasoner == pytest.approx(
        main.lam * bin_value(1 / 3, main.n_bins))
    assert with_bonus.reward_verifier == without.reward_verifier
    assert (with_bonus.f1_reasoner, with_bonus.f1_verifier) == (without.f1_reasoner,
                                                                without.f1_verifier)


class _PreparedOnly:
    """A trainer stand-in for ``verifier_update``: ``prepare`` gives hand-made inputs and
    ``learn`` returns the advantages it was handed, so the step's advantage wiring is seen."""

    def __init__(self, batch):
        self.batch = batch

    def prepare(self, trajectories, scores, group_ids, entropy_first=False):
        advantages = torch.where(self.batch.loss_mask, 0.3, 0.0)
        return UpdateInputs(self.batch, None, None, advantages,
                            torch.full(self.batch.input_ids.shape, 0.5))

    def learn(self, inputs):
        return SimpleNamespace(metrics={"advantages": inputs.advantages})


def test_w_o_proc_adv_leaves_the_verifiers_outcome_advantages(tokenizer):
    d = hamlet_dialogue()
    split = split_actions(d.verifier, ["verify", "response"])
    trainer = _PreparedOnly(encode_trajectories([split.trajectory], tokenizer, max_len=4096))
    record = QARecord("q", HAMLET, GOLD)
    main, ablation = (load_config(path, ArrConfig) for path in
                      ("configs/arr.yaml", "configs/arr-no-proc.yaml"))
    scores = score([d], [record], main)
    (with_proc, term), (without, _) = (
        verifier_update(trainer, [split], [d], [record], scores, [0.8], config)
        for config in (main, ablation))
    base = torch.where(trainer.batch.loss_mask, 0.3, 0.0)
    assert torch.equal(without["advantages"], base)
    changed = with_proc["advantages"] != base
    ids = action_token_ids(trainer.batch.segment_ids, [split.segment_action])
    assert changed.any() and not changed[ids < 0].any()  # only critique tokens move
    assert torch.equal(with_proc["advantages"], term.advantages)
