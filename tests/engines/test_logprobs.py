"""Per-token log-probs: alignment, padding invariance, micro-batching, gradient variants."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from advrag.agents.types import Trajectory
from advrag.engines.local.logprobs import (
    MATH_ATTENTION_MAX_WIDTH,
    micro_batches,
    packed_inputs,
    padded_only_on_the_right,
    sequence_logprobs,
    token_logprobs,
)
from advrag.engines.local.tokenize import Batch, encode_trajectories
from advrag.models.loading import load_policy

TEXTS = [
    "Zorvath is a city in the north.",
    "The river flows",
    "Who founded the company? <answer> Ada Lind </answer> and more words here",
]


@pytest.fixture(scope="module")
def policy(tiny_policy_dir):
    return load_policy(str(tiny_policy_dir))


@pytest.fixture(scope="module")
def batch(policy) -> Batch:
    trajs = []
    for text in TEXTS:
        traj = Trajectory()
        traj.add(text[:5], "prompt")
        traj.add(text[5:], "policy")
        trajs.append(traj)
    return encode_trajectories(trajs, policy.tokenizer, max_len=64)


def _naive(model, ids: list[int]) -> tuple[list[float], list[float]]:
    """Log-prob and entropy of each token given its prefix, one unpadded sequence at a time."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    logprobs, entropies = [0.0], [0.0]
    for t in range(1, len(ids)):
        dist = torch.log_softmax(logits[t - 1].double(), dim=-1)
        logprobs.append(float(dist[ids[t]]))
        entropies.append(float(-(dist.exp() * dist).sum()))
    return logprobs, entropies


def test_matches_a_naive_per_sequence_computation_on_the_scored_tokens(policy, batch):
    logprobs, entropy = sequence_logprobs(
        policy.model, batch, micro_batch_size=3, with_entropy=True
    )
    assert logprobs.shape == entropy.shape == batch.input_ids.shape
    for row in range(len(batch)):
        n = int(batch.attention_mask[row].sum())
        scored = batch.loss_mask[row, :n]
        assert scored.sum() >= 3 and not scored[0]
        want_lp, want_ent = _naive(policy.model, batch.input_ids[row, :n].tolist())
        torch.testing.assert_close(
            logprobs[row, :n][scored].double(),
            torch.tensor(want_lp, dtype=torch.float64)[scored],
            atol=1e-5,
            rtol=0,
        )
        torch.testing.assert_close(
            entropy[row, :n][scored].double(),
            torch.tensor(want_ent, dtype=torch.float64)[scored],
            atol=1e-5,
            rtol=0,
        )
    unscored = ~batch.loss_mask  # prompt tokens, position 0 and padding hold exactly 0
    assert torch.all(logprobs[unscored] == 0) and torch.all(entropy[unscored] == 0)


def test_only_scored_positions_reach_the_head_unless_it_scales_its_logits(policy, batch):
    head_inputs = []
    hook = policy.model.get_output_embeddings().register_forward_hook(
        lambda _module, args, _out: head_inputs.append(tuple(args[0].shape)))
    try:
        plain, _ = sequence_logprobs(policy.model, batch, micro_batch_size=3)
        policy.model.config.logit_scale = 1.0 + 1e-9  # not a plain linear head: full forward
        full, _ = sequence_logprobs(policy.model, batch, micro_batch_size=3)
    finally:
        hook.remove()
        del policy.model.config.logit_scale
    hidden = policy.model.config.hidden_size
    assert head_inputs == [(int(batch.loss_mask.sum()), hidden),
                           (*batch.input_ids.shape, hidden)]
    torch.testing.assert_close(full, plain, atol=1e-5, rtol=0)
    assert torch.equal(full != 0, batch.loss_mask)


def test_padding_columns_do_not_change_real_tokens(policy, batch):
    padded = _padded(batch, 7, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        plain, _ = token_logprobs(policy.model, batch)
        wide, _ = token_logprobs(policy.model, padded)
    seq = batch.input_ids.shape[1]
    torch.testing.assert_close(wide[:, :seq], plain, atol=1e-5, rtol=0)
    assert torch.all(wide[:, seq:] == 0)


def _padded(batch: Batch, extra: int, pad_id: int) -> Batch:
    """``batch`` with ``extra`` padding columns on the right."""
    def pad(values, value=0):
        return torch.nn.functional.pad(values, (0, extra), value=value)

    return Batch(input_ids=pad(batch.input_ids, pad_id), attention_mask=pad(batch.attention_mask),
                 loss_mask=pad(batch.loss_mask), segment_ids=pad(batch.segment_ids, -1),
                 truncated_mask=batch.truncated_mask)


def test_short_micro_batches_run_the_math_attention_kernel_to_the_same_values(policy, batch):
    flash_enabled = []
    hook = policy.model.get_decoder().register_forward_pre_hook(
        lambda *_: flash_enabled.append(torch.backends.cuda.flash_sdp_enabled()))
    short = _padded(batch, MATH_ATTENTION_MAX_WIDTH - batch.input_ids.shape[1],
                    policy.tokenizer.pad_token_id)
    wide = _padded(short, 1, policy.tokenizer.pad_token_id)
    try:
        with torch.no_grad():
            math, _ = token_logprobs(policy.model, short)
            flash, _ = token_logprobs(policy.model, wide)
    finally:
        hook.remove()
    assert flash_enabled == [False, True]
    torch.testing.assert_close(math, flash[:, :MATH_ATTENTION_MAX_WIDTH], atol=1e-5, rtol=0)


def _attention_kernels(model, batch: Batch) -> set[str]:
    """The SDPA kernels one differentiable forward and backward of ``batch`` ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        logprobs, _ = token_logprobs(model, batch)
        logprobs.sum().backward()
    names = {event.key for event in prof.key_averages()}
    return {"flash" if "flash_attention" in name else "math"
            for name in names if "flash_attention" in name or name == "aten::bmm"}


def test_compiled_layers_choose_the_attention_kernel_by_width_as_eager_ones_do(
        tiny_policy_dir, batch, cxx_compiler, tmp_path, monkeypatch):
    from advrag.engines.local.policy import TrainablePolicy

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # no graph of an earlier run
    trainable = TrainablePolicy(load_policy(str(tiny_policy_dir)).model, compile_update=True)
    pad = load_policy(str(tiny_policy_dir)).tokenizer.pad_token_id
    short = _padded(batch, MATH_ATTENTION_MAX_WIDTH - batch.input_ids.shape[1], pad)
    with trainable.training():
        first = _attention_kernels(trainable.model, short)
        wide = _attention_kernels(trainable.model, _padded(short, 64, pad))
    assert (first, wide) == ({"math"}, {"flash"})  # a graph each: dynamo guards on the width


def test_micro_batching_equals_one_batch(policy, batch):
    one_lp, one_ent = sequence_logprobs(
        policy.model, batch, micro_batch_size=len(batch), with_entropy=True
    )
    each_lp, each_ent = sequence_logprobs(
        policy.model, batch, micro_batch_size=1, with_entropy=True
    )
    torch.testing.assert_close(each_lp, one_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(each_ent, one_ent, atol=1e-5, rtol=0)


def test_only_the_token_variant_carries_gradients(policy, batch):
    with_grad, entropy = token_logprobs(policy.model, batch.rows(0, 1))
    assert with_grad.requires_grad and entropy is None
    without, _ = sequence_logprobs(policy.model, batch, micro_batch_size=2)
    assert not without.requires_grad


def test_micro_batches_group_rows_of_similar_length_and_cover_each_once():
    # lengths 3, 7, 1, 7, 5 → longest first, ties in batch order: rows 1, 3, 4, 0, 2
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in (3, 7, 1, 7, 5)], dtype=torch.bool)
    assert [m.tolist() for m in micro_batches(mask, 2)] == [[1, 3], [4, 0], [2]]
    assert [m.tolist() for m in micro_batches(mask, 8)] == [[1, 3, 4, 0, 2]]
    with pytest.raises(ValueError):
        micro_batches(mask, 0)


def _masks_given_to_the_decoder(policy, batch: Batch) -> tuple[Tensor, list]:
    """Log-probs of ``batch`` and the ``attention_mask`` each decoder call received."""
    masks = []
    hook = policy.model.get_decoder().register_forward_pre_hook(
        lambda _module, _args, kwargs: masks.append(kwargs.get("attention_mask")),
        with_kwargs=True)
    try:
        with torch.no_grad():
            logprobs, _ = token_logprobs(policy.model, batch)
    finally:
        hook.remove()
    return logprobs, masks


def _moved_to_the_left(batch: Batch) -> Batch:
    """``batch`` with each row's padding moved before its tokens (left padding)."""
    shift = (~batch.attention_mask).sum(dim=1)

    def roll(values):
        return torch.stack([row.roll(int(n)) for row, n in zip(values, shift)])

    return Batch(input_ids=roll(batch.input_ids), attention_mask=roll(batch.attention_mask),
                 loss_mask=roll(batch.loss_mask), segment_ids=roll(batch.segment_ids),
                 truncated_mask=batch.truncated_mask)


def test_right_padded_rows_run_causal_attention_without_a_mask(policy, batch):
    assert not batch.attention_mask.all()  # rows of different lengths: padding present
    right, masks = _masks_given_to_the_decoder(policy, batch)
    assert masks == [None]
    left_batch = _moved_to_the_left(batch)
    left, masks = _masks_given_to_the_decoder(policy, left_batch)
    assert len(masks) == 1 and torch.equal(masks[0].bool(), left_batch.attention_mask)
    for row in range(len(batch)):  # the same tokens scored to the same values (RoPE is relative)
        torch.testing.assert_close(left[row][left_batch.loss_mask[row]],
                                   right[row][batch.loss_mask[row]], atol=1e-5, rtol=0)


def test_padding_on_the_right_only_is_recognised():
    assert padded_only_on_the_right(torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]]))
    assert not padded_only_on_the_right(torch.tensor([[1, 1, 0], [0, 1, 1]]))
    assert not padded_only_on_the_right(torch.tensor([[1, 0, 1]]))


def test_packed_inputs_lay_rows_end_to_end_with_their_own_positions():
    real = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)  # an empty row too
    ids = torch.tensor([[5, 6, 7], [0, 0, 0], [8, 9, 0]])
    batch = Batch(input_ids=ids, attention_mask=real, loss_mask=real, segment_ids=real.long() - 1,
                  truncated_mask=torch.zeros(3, dtype=torch.bool))
    inputs, (rows, cols) = packed_inputs(batch, torch.tensor([0, 2, 2]), torch.tensor([2, 0, 1]))
    assert inputs["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert inputs["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1, 1, 1]]
    assert inputs["cu_seq_lens_q"].tolist() == [0, 3, 5]  # the empty row bounds nothing
    assert rows.tolist() == [0, 0, 0] and cols.tolist() == [2, 3, 4]  # token 7, 8 and 9
