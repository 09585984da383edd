"""verl's checkpoints back into advrag: a real two-rank FSDP2 checkpoint, written on the CPU by
verl's own FSDPCheckpointManager (gloo), merged by verl's model merger into a directory
advrag loads, with a LoRA run's adapter folded in."""

from __future__ import annotations

import json

import pytest
import torch
from verl_stand_in import verl_saves, weights

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")
pytestmark = pytest.mark.slow

from advrag.engines.verl.checkpoints import latest_actor, merge_to_hf  # noqa: E402


def test_the_newest_complete_step_is_the_one_verl_names(tmp_path):
    for step in (2, 4):
        (tmp_path / f"global_step_{step}" / "actor").mkdir(parents=True)
        (tmp_path / f"global_step_{step}" / "actor" / "fsdp_config.json").write_text("{}")
    (tmp_path / "global_step_6" / "actor").mkdir(parents=True)  # a save that never finished
    assert latest_actor(tmp_path) == (4, tmp_path / "global_step_4" / "actor")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2\n")
    assert latest_actor(tmp_path)[0] == 2
    with pytest.raises(FileNotFoundError, match="trainer.save_freq"):
        latest_actor(tmp_path / "nothing-here")


def test_a_two_rank_checkpoint_merges_into_the_model_it_saved(tmp_path, tiny_policy_dir):
    actor = verl_saves(tiny_policy_dir, tmp_path / "verl", step=3)
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2,
                                                                    "world_size": 2}
    step, found = latest_actor(tmp_path / "verl")
    merged = merge_to_hf(found, tmp_path / "merged")
    assert step == 3 and (merged / "config.json").is_file()
    assert not list(tmp_path.glob(".merged.*"))  # nothing half-written left beside it
    original, back = weights(tiny_policy_dir), weights(merged)
    assert set(back) == set(original)
    for name, tensor in original.items():  # verl's merger writes bf16
        assert torch.equal(back[name], tensor.to(torch.bfloat16).to(torch.float32)), name

    from advrag.models.loading import load_policy

    policy = load_policy(str(merged))  # what advrag's flows load, tokenizer included
    assert policy.tokenizer("a b").input_ids and policy.tokenizer.chat_template


def test_a_lora_runs_adapter_is_folded_into_the_weights(tmp_path, tiny_policy_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    actor = verl_saves(tiny_policy_dir, tmp_path / "verl", step=1, lora=True)
    merged = merge_to_hf(actor, tmp_path / "merged")
    assert not (merged / "lora_adapter").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    expected = PeftModel.from_pretrained(base, tmp_path / "verl" / "expected-adapter")
    expected = expected.merge_and_unload()
    back = weights(merged)
    changed = [n for n, t in expected.state_dict().items()
               if not torch.equal(t, weights(tiny_policy_dir)[n])]
    assert changed and all("q_proj" in n or "v_proj" in n for n in changed)
    for name, tensor in expected.state_dict().items():
        torch.testing.assert_close(back[name], tensor, atol=0.02, rtol=0.02)


def test_a_failed_merge_names_the_checkpoint_and_leaves_nothing(tmp_path):
    actor = tmp_path / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 2}')
    with pytest.raises(RuntimeError, match="model merger failed on .*global_step_1"):
        merge_to_hf(actor, tmp_path / "merged")
    assert not (tmp_path / "merged").exists() and not list(tmp_path.glob(".merged.*"))
