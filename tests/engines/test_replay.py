"""Recording an agent loop's generate calls and replaying them on the raw transformers engine."""

from __future__ import annotations

import pytest
import torch

from advrag.agents.search_loop import run_search_agent
from advrag.datasets.loaders import load_qa
from advrag.engines.local.generation import HFGenerator
from advrag.engines.replay import GenerateCall, RecordingGenerator, replay
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever

MAX_NEW = 12


@pytest.fixture(scope="module")
def policy(tiny_policy_dir):
    return load_policy(str(tiny_policy_dir))


@pytest.fixture(scope="module")
def questions(small_world_dir):
    return [r.question for r in load_qa(small_world_dir / "train.jsonl")[:5]]


def test_recording_changes_nothing_and_counts_every_call(policy, questions, small_index_dir):
    """Greedy loop with and without the recorder: the same transcripts; one record per call."""
    retriever = load_retriever(small_index_dir)
    plain = HFGenerator(policy.model, policy.tokenizer, batch_size=2)
    recorder = RecordingGenerator(HFGenerator(policy.model, policy.tokenizer, batch_size=2))
    kwargs = dict(max_turns=2, topk=2, max_new_tokens=MAX_NEW)
    expected = run_search_agent(questions, plain, retriever, **kwargs)
    recorded = run_search_agent(questions, recorder, retriever, **kwargs)
    assert [t.text for t in recorded] == [t.text for t in expected]
    # 2 turns + the forced answer for whoever is still unfinished: at most 3 calls, at least 1.
    assert 1 <= len(recorder.calls) <= 3
    assert len(recorder.calls[0].prompts) == len(questions)
    for call in recorder.calls:
        assert len(call.completion_tokens) == len(call.prompts)
        assert all(1 <= n <= MAX_NEW for n in call.completion_tokens)
        assert call.seconds > 0
    assert recorder.tokens == sum(sum(c.completion_tokens) for c in recorder.calls)


def test_hf_replay_runs_each_row_for_its_own_length(policy):
    """Lengths [3, 5, 4] in micro-batches of 2: rows leave the batch at their own lengths, so
    the engine produces 3 + 5 + 4 tokens per call."""
    generator = HFGenerator(policy.model, policy.tokenizer, batch_size=2, temperature=1.0)
    call = GenerateCall(["The river", "Zorvath is a city", "Who founded"], 8, [3, 5, 4], 0.1)
    torch.manual_seed(0)
    seconds, produced = replay(generator, [call, call])
    assert produced == 2 * (3 + 5 + 4)
    assert seconds > 0


def test_recorded_lengths_are_the_tokens_the_engine_sampled(policy):
    """Greedy, no stop: each completion's count equals the length of its token ids."""
    generator = HFGenerator(policy.model, policy.tokenizer, batch_size=2)
    recorder = RecordingGenerator(generator)
    recorder.generate(["The river", "Zorvath is a city", "Who founded"], max_new_tokens=MAX_NEW)
    enc = policy.tokenizer(["The river", "Zorvath is a city", "Who founded"],
                           add_special_tokens=False)["input_ids"]
    expected = []
    for ids in enc:  # one at a time: no padding, so every new token is a real one
        out = policy.model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                                    pad_token_id=policy.tokenizer.pad_token_id,
                                    eos_token_id=policy.tokenizer.eos_token_id)
        new = out[0, len(ids):].tolist()
        expected.append(len([t for t in new if t != policy.tokenizer.pad_token_id]))
    assert recorder.calls[0].completion_tokens == [max(n, 1) for n in expected]


def test_replay_refuses_what_it_cannot_drive(policy):
    recorder = RecordingGenerator(HFGenerator(policy.model, policy.tokenizer))
    with pytest.raises(TypeError, match="no raw replay for RecordingGenerator"):
        replay(recorder, [])
    with pytest.raises(TypeError, match="does not report its completions' token counts"):
        RecordingGenerator(recorder)
