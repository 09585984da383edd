"""Loss masks: which tokens the policy sampled, and padding them into a batch.

Only text the trained policy generated is learned from, plus REX-RAG's inserted
exploration prompt (``"probe"``, which its release keeps in the loss); prompts,
retrieved passages and hints (``"env"``) and the other agent's messages
(``"peer"``) get mask 0 (the sources of ``advrag.agents.types.Segment``). All
masks here are bool tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

SOURCES = ("prompt", "policy", "env", "peer", "probe")

PAD_SIDES = ("right", "left")


def segment_loss_mask(
    segment_token_counts: Sequence[int],
    segment_sources: Sequence[str],
    trainable: Sequence[str] = ("policy", "probe"),
) -> Tensor:
    """Per-token loss mask of a trajectory laid out segment after segment.

    Args:
        segment_token_counts: number of tokens of each segment, in order.
        segment_sources: each segment's source, one of ``SOURCES``.
        trainable: the sources whose tokens are learned from.

    Returns:
        Bool tensor of shape ``(sum(segment_token_counts),)``, True on the
        tokens of trainable segments.
    """
    if len(segment_token_counts) != len(segment_sources):
        raise ValueError(
            f"{len(segment_token_counts)} token counts for {len(segment_sources)} segments"
        )
    unknown = (set(segment_sources) | set(trainable)) - set(SOURCES)
    if unknown:
        raise ValueError(f"unknown segment sources {sorted(unknown)}; expected {list(SOURCES)}")
    counts = torch.tensor(list(segment_token_counts), dtype=torch.long)
    if (counts < 0).any():
        raise ValueError(f"token counts must be >= 0, got {list(segment_token_counts)}")
    keep = torch.tensor([source in trainable for source in segment_sources], dtype=torch.bool)
    return torch.repeat_interleave(keep, counts)


def pad_masks(masks: Sequence[Tensor], side: str = "right") -> Tensor:
    """Stack 1-D masks of different lengths into ``(batch, seq)``, padding with 0.

    ``seq`` is the longest mask; ``side`` says where the padding goes. The
    result keeps the dtype and device of the first mask.
    """
    if side not in PAD_SIDES:
        raise ValueError(f"unknown padding side {side!r}; expected one of {list(PAD_SIDES)}")
    if not masks:
        raise ValueError("pad_masks needs at least one mask")
    if any(mask.dim() != 1 for mask in masks):
        raise ValueError("pad_masks takes 1-D masks")
    seq = max(mask.shape[0] for mask in masks)
    out = masks[0].new_zeros(len(masks), seq)
    for row, mask in zip(out, masks):
        start = seq - mask.shape[0] if side == "left" else 0
        row[start : start + mask.shape[0]] = mask
    return out


def response_mask_from_prompt_lengths(
    prompt_lengths: Sequence[int] | Tensor, total_lengths: Sequence[int] | Tensor, seq_len: int
) -> Tensor:
    """Response mask of single-turn, right-padded sequences ``prompt ⊕ response ⊕ pad``.

    Args:
        prompt_lengths: tokens of each prompt, ``(batch,)``.
        total_lengths: prompt plus response tokens of each row, ``(batch,)``.
        seq_len: columns of the padded batch.

    Returns:
        Bool ``(batch, seq_len)``: True at positions ``prompt_len <= t < total_len``.
    """
    prompt = torch.as_tensor(prompt_lengths, dtype=torch.long)
    total = torch.as_tensor(total_lengths, dtype=torch.long, device=prompt.device)
    if prompt.dim() != 1 or prompt.shape != total.shape:
        raise ValueError(f"lengths must be two (batch,) vectors, got {prompt.shape}, {total.shape}")
    if (prompt < 0).any() or (total < prompt).any() or (total > seq_len).any():
        raise ValueError("need 0 <= prompt_length <= total_length <= seq_len for every row")
    positions = torch.arange(seq_len, device=prompt.device)
    return (positions >= prompt[:, None]) & (positions < total[:, None])
