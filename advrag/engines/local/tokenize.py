"""Trajectories → padded token batches with a loss mask on the policy's own tokens.

Each segment of a trajectory is tokenised on its own (``add_special_tokens=False``)
and the ids are concatenated, so every token belongs to exactly one segment and
the loss mask follows the segment sources exactly (``core.masks``): 1 on
``"policy"`` tokens, 0 on prompt, retrieved passages, hints and peer messages.

Why re-tokenise instead of keeping the sampled ids: the agents exchange text,
and a segment boundary can split what one whole-string tokenisation would
merge, so these ids may differ from the ids the sampler drew. That is
harmless for the ratio: the old, reference and new log-probs are all
recomputed by the training model on these exact ids, so ``logprobs −
old_logprobs`` compares the same tokens under two weights.

Layout rules:
- Right padding with the tokenizer's pad id; ``attention_mask`` is 1 on real tokens.
- Truncation from the right: a trajectory longer than ``max_len`` tokens keeps its
  first ``max_len`` tokens and loses the tail (so the prompt survives and the
  cut tokens are never learned from); ``truncated_mask`` records which rows lost tokens.
- Position 0 never carries loss: no token precedes it, so the model does not
  predict it (``logprobs`` puts 0 there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from advrag.agents.types import Trajectory
from advrag.core.masks import segment_loss_mask


@dataclass
class Batch:
    """Token ids and masks of a batch of trajectories, all ``(batch, seq)`` unless noted.

    Attributes:
        input_ids: token ids, right-padded with the pad id (long).
        attention_mask: True on real tokens, False on padding.
        loss_mask: True on tokens sampled by the trained policy.
        segment_ids: index of the segment each token came from, −1 on padding
            (lets per-segment quantities, e.g. REX-RAG weights, be mapped to tokens).
        truncated_mask: ``(batch,)``, True where the trajectory lost tokens to ``max_len``.
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    segment_ids: Tensor
    truncated_mask: Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on ``device``."""
        return Batch(**{name: value.to(device) for name, value in vars(self).items()})

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` (see ``select``)."""
        return self.select(torch.arange(start, stop, device=self.input_ids.device))

    def select(self, index: Tensor) -> Batch:
        """Rows ``index``, in that order, with trailing columns that are padding in all of them dropped."""
        width = max(int(self.attention_mask[index].sum(dim=1).max()), 1)
        return Batch(
            input_ids=self.input_ids[index, :width],
            attention_mask=self.attention_mask[index, :width],
            loss_mask=self.loss_mask[index, :width],
            segment_ids=self.segment_ids[index, :width],
            truncated_mask=self.truncated_mask[index],
        )


def _encode_one(
    trajectory: Trajectory, tokenizer, max_len: int
) -> tuple[Tensor, Tensor, Tensor, bool]:
    """Ids ``(n,)``, loss mask ``(n,)`` and segment index ``(n,)`` of one trajectory (n ≤ max_len).

    Also returns whether tokens were cut off at ``max_len``.
    """
    pieces = [
        tokenizer(segment.text, add_special_tokens=False)["input_ids"]
        for segment in trajectory.segments
    ]
    counts = [len(piece) for piece in pieces]
    ids = torch.tensor([i for piece in pieces for i in piece], dtype=torch.long)
    loss_mask = segment_loss_mask(counts, [s.source for s in trajectory.segments])
    segment_ids = torch.repeat_interleave(
        torch.arange(len(counts)), torch.tensor(counts, dtype=torch.long)
    )
    if ids.numel() > 0:
        loss_mask[0] = False
    truncated = ids.numel() > max_len
    return ids[:max_len], loss_mask[:max_len], segment_ids[:max_len], truncated


def encode_trajectories(trajectories: Sequence[Trajectory], tokenizer, *, max_len: int) -> Batch:
    """Tokenise trajectories segment by segment into one right-padded ``Batch``.

    Args:
        trajectories: the episodes; each segment's ``source`` decides its loss mask.
        tokenizer: a transformers tokenizer with a pad token.
        max_len: the most tokens kept per trajectory (its tail is cut beyond that).

    Returns:
        A ``Batch`` whose ``seq`` is the longest kept trajectory (at least 1).
    """
    if not trajectories:
        raise ValueError("encode_trajectories needs at least one trajectory")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
    encoded = [_encode_one(t, tokenizer, max_len) for t in trajectories]
    seq = max(max(len(ids) for ids, *_ in encoded), 1)
    batch = Batch(
        input_ids=torch.full((len(encoded), seq), tokenizer.pad_token_id, dtype=torch.long),
        attention_mask=torch.zeros(len(encoded), seq, dtype=torch.bool),
        loss_mask=torch.zeros(len(encoded), seq, dtype=torch.bool),
        segment_ids=torch.full((len(encoded), seq), -1, dtype=torch.long),
        truncated_mask=torch.tensor([truncated for *_, truncated in encoded], dtype=torch.bool),
    )
    for row, (ids, loss_mask, segment_ids, _) in enumerate(encoded):
        n = len(ids)
        batch.input_ids[row, :n] = ids
        batch.attention_mask[row, :n] = True
        batch.loss_mask[row, :n] = loss_mask
        batch.segment_ids[row, :n] = segment_ids
    return batch


def token_lengths(trajectories: Sequence[Trajectory], tokenizer) -> list[int]:
    """Tokens of each trajectory as ``encode_trajectories`` lays it out (segment by segment)."""
    return [sum(len(tokenizer(segment.text, add_special_tokens=False)["input_ids"])
                for segment in t.segments) for t in trajectories]


def refuse_cut(trajectories: Sequence[Trajectory], tokenizer, max_len: int, setting: str,
               what: str = "demonstrations") -> None:
    """Refuse, before training, trajectories that ``max_len`` would cut (their tail holds the
    answer a warm-up must teach): the count, the longest and the setting to raise."""
    lengths = token_lengths(trajectories, tokenizer)
    over = [n for n in lengths if n > max_len]
    if over:
        raise ValueError(f"{len(over)} of {len(lengths)} {what} are longer than {setting} = "
                         f"{max_len} tokens (the longest {max(over)}): their ends would be cut "
                         f"away; raise {setting} to at least {max(over)}")


def token_counter(tokenizer):
    """``text → tokens`` in ``tokenizer``, no special tokens: how a segment is encoded here, and
    what a token budget is counted in (``agents.budgets``)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
