"""Stand-ins for the verl tests: verl's checkpoint, written as verl's trainer writes it, on
the CPU (its own FSDPCheckpointManager saving a two-rank FSDP2 model over gloo where a test
says), a scripted UR² summariser for a retrieval server that summarises, and the launcher's
``prepare`` of a config's first verl run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

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
    import tempfile

    actor = root / f"global_step_{step}" / "actor"
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "verl_saves.py"  # spawned ranks import their function by file
        script.write_text(SAVE)
        run = subprocess.run([sys.executable, str(script), str(model_dir), str(actor),
                              "lora" if lora else "full", free_port()],
                             capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return actor


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()


class Summarising:
    """UR²'s summariser, scripted: "tragedy" queries get a summary, the rest the fallback."""

    def __init__(self) -> None:
        from advrag.retrieval.summary import SummaryStats

        self.stats = SummaryStats()  # what the server's /health reports

    def summarise(self, pairs):
        from advrag.common.types import Summary
        from advrag.retrieval.summary import SUMMARY_FALLBACK_MESSAGE

        return [Summary(f"A summary about {q}.", "summary") if "tragedy" in q
                else Summary(SUMMARY_FALLBACK_MESSAGE, "fallback") for q, _ in pairs]


def prepare(config, out_dir, **options):
    """``launch.prepare`` of the first verl run the config's recipe describes
    (``Recipe.verl_runs``)."""
    from advrag.engines.verl import launch
    from advrag.recipes import RECIPES

    return launch.prepare(config, RECIPES[config.recipe](config).verl_runs()[0], out_dir,
                          **options)
