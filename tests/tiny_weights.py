"""Tiny random models whose greedy continuations compare well across code paths."""

from __future__ import annotations

import torch
from torch import nn


def redraw_matrices(model: nn.Module, std: float = 0.3, seed: int = 0) -> None:
    """Every 2-D weight of ``model`` drawn again from N(0, std²) under ``seed``.

    A freshly initialised tiny model repeats one token; these weights give varied
    text whose logits are far apart, so two computations of the same greedy
    continuation agree even where their rounding differs.
    """
    torch.manual_seed(seed)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.ndim == 2:
                weight.normal_(0.0, std)
