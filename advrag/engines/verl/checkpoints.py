"""verl's checkpoints back into advrag: the newest one a run saved, merged by verl's own model
merger into one Hugging Face directory that advrag's flows load, register and benchmark.

verl's trainer saves ``<trainer.default_local_dir>/global_step_<N>/actor/``: one
``model_world_size_<W>_rank_<r>.pt`` shard per rank, ``fsdp_config.json`` and the model's
config under ``huggingface/``, and names the newest complete step in
``latest_checkpointed_iteration.txt``. ``python -m verl.model_merger merge --backend fsdp``
joins the shards into a Hugging Face directory (bf16 weights); a LoRA run's adapter comes out
beside them (``lora_adapter/``) and is merged into the weights here, so the result is a plain
causal LM like the local engine's export.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from advrag.common.fileio import atomic_dir

LATEST = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"global_step_(\d+)")


def completed_step(root: str | Path) -> int | None:
    """The newest step verl finished saving under ``root`` (the step ``LATEST`` names), or None."""
    path = Path(root) / LATEST
    text = path.read_text().strip() if path.is_file() else ""
    return int(text) if text.isdigit() else None


def latest_actor(root: str | Path) -> tuple[int, Path]:
    """(step, actor directory) of the newest checkpoint under verl's ``default_local_dir``.

    The step ``latest_checkpointed_iteration.txt`` names (verl writes it once a save is
    complete), else the highest ``global_step_<N>`` whose actor has ``fsdp_config.json``.
    """
    root = Path(root)
    named = completed_step(root)
    if named is not None:
        steps = [named]
    else:
        steps = sorted((int(m.group(1)) for p in root.glob("global_step_*")
                        if (m := _STEP_DIR.fullmatch(p.name))), reverse=True)
    for step in steps:
        actor = root / f"global_step_{step}" / "actor"
        if (actor / "fsdp_config.json").is_file():
            return step, actor
    raise FileNotFoundError(
        f"no complete verl checkpoint under {root} (global_step_<N>/actor/fsdp_config.json): "
        "set trainer.save_freq (our checkpoint_every) so the run saves one")


def merge_to_hf(actor: str | Path, target: str | Path) -> Path:
    """Merge the checkpoint in ``actor`` into a Hugging Face directory at ``target`` (written
    whole or not at all), with a LoRA adapter folded into the weights."""
    target = Path(target)
    with atomic_dir(target) as tmp:
        merged = tmp / "merged"
        run = subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend",
                              "fsdp", "--local_dir", str(actor), "--target_dir", str(merged)],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"verl's model merger failed on {actor} (exit {run.returncode}): "
                               f"{run.stderr.strip()[-1500:]}")
        _fold_adapter(merged, tmp)
        for source in (merged, Path(actor) / "huggingface"):
            _copy_beside_weights(source, tmp)
        shutil.rmtree(merged)
    return target


def _fold_adapter(merged: Path, out: Path) -> None:
    """``merged``'s weights (with its ``lora_adapter/`` merged in, if any) saved into ``out``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(merged, dtype="auto")
    adapter = merged / "lora_adapter"
    if adapter.is_dir():
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.save_pretrained(out)


def _copy_beside_weights(source: Path, out: Path) -> None:
    """The tokenizer and chat template files of ``source`` that ``out`` lacks (not weights)."""
    for path in source.iterdir():
        weights = path.suffix in (".safetensors", ".bin", ".pt") or path.name.endswith(
            ".index.json")
        if path.is_file() and not weights and not (out / path.name).exists():
            shutil.copy2(path, out / path.name)
