"""bench_trl's bound: the fewest matmul FLOPs of an update, and what an update at the peak allows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_trl(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_trl_bounds",
                                                  BENCH / "steps" / "bench_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_llama() -> LlamaForCausalLM:
    """Two layers, hidden 8, MLP 16, vocabulary 100, tied head: 656 weights a layer by hand
    (q, k, v, o 64 each; gate, up, down 128 each; two norms 8 each), 800 in the embedding."""
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=100, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True))


def test_update_floor_counts_the_layers_per_token_and_the_head_per_scored_token(bench_trl):
    model = tiny_llama()
    # full: 6 · (1312 weights · 10 tokens + 800 · 4 scored tokens) = 97,920 FLOPs
    assert bench_trl.update_floor_gflop(model, "full", 10, 4) == pytest.approx(97_920e-9)
    lora = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear"))
    # LoRA: no weight gradients for the frozen base, so 4 instead of 6; adapters not counted
    assert bench_trl.update_floor_gflop(lora, "lora", 10, 4) == pytest.approx(65_280e-9)


def test_peak_bound_by_hand(bench_trl):
    sides = {"ours": {"tokens": 100.0, "rollout_s": 1.0, "update_s": 4.0},
             "trl": {"tokens": 100.0, "update_s": 6.0, "tokens_per_s": 10.0}}
    bound = bench_trl.peak_bound(sides, floor_gflop=20.0, peak=10.0)  # 2 s at the peak
    assert bound["update_share_of_peak_ours"] == pytest.approx(0.5)
    assert bound["update_share_of_peak_trl"] == pytest.approx(1 / 3)
    # our step could be 1 s of rollout + 2 s of update: 100 / 3 tokens/s against TRL's 10
    assert bound["best_ratio_tokens_per_s_with_our_update_at_peak"] == pytest.approx(10 / 3)
