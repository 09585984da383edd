"""verl's checkpoints back into advrag: a real two-rank FSDP2 checkpoint, written on the CPU by
verl's own FSDPCheckpointManager (gloo), merged by verl's model merger into a directory
advrag loads, with a LoRA run's adapter folded in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl", reason="verl is installed by `make verl` (part of `make test`)")
pytestmark = pytest.mark.slow

from advrag.engines.verl.checkpoints import latest_actor, merge_to_hf  # noqa: E402

SAVE = """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank(r, world, model_dir, actor, lora, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(r))
    dist.init_process_group("gloo", rank=r, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if lora:
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(0)  # every rank the same adapter (verl syncs rank 0's)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8,
                                                  target_modules=["q_proj", "v_proj"]))
        torch.manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)  # a trained adapter: merging it changes the weights
        if r == 0:
            model.save_pretrained(os.path.join(actor, "..", "..", "expected-adapter"))
    # verl's FSDP workers shard over a mesh named "fsdp"; so does this stand-in for them
    fully_shard(model, mesh=init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",)))
    manager = FSDPCheckpointManager(model, None, processing_class=AutoTokenizer.from_pretrained(
        model_dir), checkpoint_config={"save_contents": ["model"], "load_contents": ["model"]})
    manager.save_checkpoint(actor, global_step=int(actor.split("global_step_")[1].split("/")[0]))
    dist.destroy_process_group()

if __name__ == "__main__":
    model_dir, actor, lora, port = sys.argv[1:5]
    mp.spawn(rank, args=(2, model_dir, actor, lora == "lora", port), nprocs=2)
"""


def free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def verl_saves(model_dir: Path, root: Path, step: int, lora: bool = False) -> Path:
    """verl's checkpoint manager saves ``model_dir`` (a LoRA-wrapped copy with ``lora``) as
    step ``step`` of a run whose ``default_local_dir`` is ``root``; the actor directory."""
    actor = root / f"global_step_{step}" / "actor"
    script = root.parent / "verl_saves.py"  # spawned ranks import their function by file
    script.write_text(SAVE)
    run = subprocess.run([sys.executable, str(script), str(model_dir), str(actor),
                          "lora" if lora else "full", free_port()],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return actor


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()


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
    assert policy.tokenizer("a b").input_ids


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
