"""ARR's process-aware advantage term (``core.arr_process``), by hand on tensors."""

from __future__ import annotations

import math

import torch

from advrag.core.advantages import ADVANTAGE_TERMS
from advrag.core.arr_process import arr_process_advantages

# one row: prompt, action 0 (2 tokens), markup, action 1 (2 tokens), padding; action 2 was cut
ACTION_IDS = torch.tensor([[-1, 0, 0, -1, 1, 1, -1]])
LOSS_MASK = torch.tensor([[0, 1, 1, 1, 1, 1, 0]], dtype=torch.bool)
ENTROPY = torch.tensor([[9.0, 0.5, 0.5, 9.0, 1.0, 3.0, 9.0]])
IN_DOCS = torch.tensor([[True, True, True]])
IN_ACTION = torch.tensor([[False, True, True]])


def test_process_term_by_hand():
    base = torch.where(LOSS_MASK, 0.3, 0.0)
    out = arr_process_advantages(base, ENTROPY, ACTION_IDS, LOSS_MASK, IN_DOCS, IN_ACTION,
                                 torch.tensor([1.0]), torch.tensor([0.8]))
    # mean entropies: action 0 (0.5 + 0.5)/2 = 0.5, action 1 (1 + 3)/2 = 2, action 2 no tokens
    assert torch.allclose(out.mean_entropy[0, :2], torch.tensor([0.5, 2.0]))
    assert math.isnan(out.mean_entropy[0, 2]) and math.isnan(out.clarity[0, 2])
    # clarity (eq. 7): action 0 drops the gold → −e^−0.5; action 1 keeps it → +e^−2
    c0, c1 = -math.exp(-0.5), math.exp(-2.0)
    assert torch.allclose(out.clarity[0, :2], torch.tensor([c0, c1]))
    # A_proc (eq. 6) = F1·clarity·impact = 1·c·0.8; the cut action gets 0
    assert torch.allclose(out.process, torch.tensor([[0.8 * c0, 0.8 * c1, 0.0]]))
    # eq. 9: added on each action's own tokens; the markup, prompt and padding keep the base
    expected = torch.tensor([[0.0, 0.3 + 0.8 * c0, 0.3 + 0.8 * c0, 0.3,
                              0.3 + 0.8 * c1, 0.3 + 0.8 * c1, 0.0]])
    assert torch.allclose(out.advantages, expected)


def test_no_gold_in_the_documents_or_a_wrong_reasoner_gives_nothing():
    base = torch.where(LOSS_MASK, -0.7, 0.0)
    no_docs = arr_process_advantages(base, ENTROPY, ACTION_IDS, LOSS_MASK,
                                     torch.zeros_like(IN_DOCS), IN_ACTION,
                                     torch.tensor([1.0]), torch.tensor([1.0]))
    wrong = arr_process_advantages(base, ENTROPY, ACTION_IDS, LOSS_MASK, IN_DOCS, IN_ACTION,
                                   torch.tensor([0.0]), torch.tensor([1.0]))
    assert torch.equal(no_docs.advantages, base) and torch.equal(wrong.advantages, base)
    assert torch.equal(no_docs.clarity[0, :2], torch.zeros(2))


def test_registered_under_its_name():
    assert ADVANTAGE_TERMS["arr_process"] is arr_process_advantages
