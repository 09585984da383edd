"""A transformers model's current weights under checkpoint names, LoRA deltas folded in.

An inference engine loaded from the base checkpoint understands the names of
that checkpoint (``model.layers.0.self_attn.q_proj.weight``), not peft's
(``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`` plus
``lora_A``/``lora_B``). ``checkpoint_weights`` yields what ``merge_and_unload``
would save, computed on the fly: the training model is not modified and no
second copy of it is made (one merged tensor exists at a time). Every weight
push goes through it: into a vLLM engine and into the transformers sampling copy.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

PEFT_MARKERS = ("lora_", "modules_to_save", "original_module")


def _unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (or ``model`` itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _lora_deltas(model: nn.Module) -> dict[str, nn.Module]:
    """Module path → peft LoRA layer, for every LoRA layer whose adapter is in effect.

    Adapters that are disabled (``disable_adapter()``) or already merged into
    the base weight contribute nothing extra.
    """
    layers = {}
    for name, module in model.named_modules():
        if not hasattr(module, "get_delta_weight") or not hasattr(module, "base_layer"):
            continue
        if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
            continue
        layers[name] = module
    return layers


def _merged(layer: nn.Module, base_weight: Tensor, only: str | None) -> Tensor:
    """``base_weight`` plus the delta of adapter ``only``, or of every active adapter when None
    (a new tensor)."""
    merged = base_weight.detach().clone()
    for adapter in [only] if only else layer.active_adapters:
        if adapter not in layer.lora_A and adapter not in layer.lora_embedding_A:
            continue
        if layer.use_dora.get(adapter, False):
            raise ValueError("cannot push DoRA adapters: merge them with peft first.")
        _add_delta(layer, adapter, merged)
    return merged


def is_lora_linear(module: nn.Module) -> bool:
    """Whether ``module`` is a peft LoRA linear layer (not a subclass such as a quantised one)."""
    from peft.tuners.lora import Linear as LoraLinear

    return type(module) is LoraLinear


def plain_lora_adapter(layer: nn.Module, adapter: str) -> bool:
    """Whether ``adapter`` on ``layer`` is plain LoRA, ``scaling·B·A`` and nothing else: a LoRA
    linear layer without fan-in-fan-out weights, the adapter with no variant (DoRA) and no
    bias on B."""
    variants = getattr(layer, "lora_variant", {})  # peft >= 0.15; DoRA before
    return (is_lora_linear(layer) and not layer.fan_in_fan_out and adapter in layer.lora_A
            and adapter not in variants and not layer.use_dora.get(adapter)
            and layer.lora_B[adapter].bias is None)


def _add_delta(layer: nn.Module, adapter: str, merged: Tensor) -> None:
    """Add ``adapter``'s ``scaling·B·A`` into ``merged`` in place.

    A plain LoRA linear layer with weights of ``merged``'s dtype takes one
    ``addmm_`` (peft's ``get_delta_weight`` makes the product, scales it and adds
    it in three passes over the weight); any other layer takes peft's delta.
    """
    if plain_lora_adapter(layer, adapter) and all(
            f.weight.dtype == merged.dtype for f in (layer.lora_A[adapter], layer.lora_B[adapter])):
        merged.addmm_(layer.lora_B[adapter].weight, layer.lora_A[adapter].weight,
                      alpha=layer.scaling[adapter])
    else:
        merged += layer.get_delta_weight(adapter)  # one rounding to merged.dtype, as peft merges


@torch.no_grad()
def checkpoint_weights(model: nn.Module, adapter: str | None = None,
                       dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
    """Yield ``(checkpoint name, tensor)`` for every weight of ``model``.

    ``model`` is a transformers causal LM, possibly wrapped by peft with LoRA
    adapters: each adapted linear layer yields ``W + scale·B·A`` under the
    base layer's name, and the adapter tensors themselves are not yielded.
    ``adapter``: on a base shared by several adapters (ARR's, GAR's agents),
    merge only this one, whichever is active; None merges the active ones.
    ``dtype``: cast each tensor to it after merging (an engine's weight dtype:
    the rounding its own load would apply, done before the transfer).

    Raises:
        ValueError: the peft wrapper holds something other than LoRA on linear
            layers (e.g. ``modules_to_save`` copies), which has no single
            checkpoint name to push to.
    """
    base = _unwrap(model)
    lora_layers = _lora_deltas(base)
    for name, tensor in base.state_dict().items():
        if any(marker in name for marker in PEFT_MARKERS):
            if ".lora_" in name:
                continue
            raise ValueError(
                f"cannot push {name!r}: only LoRA adapters on linear layers can be merged "
                "into checkpoint weights (drop modules_to_save from the LoRA config)."
            )
        owner, _, leaf = name.rpartition(".")
        if owner.endswith(".base_layer"):
            owner = owner.removesuffix(".base_layer")
            if leaf == "weight" and owner in lora_layers:
                tensor = _merged(lora_layers[owner], tensor, adapter)
            name = f"{owner}.{leaf}"
        tensor = tensor.detach()
        yield name, tensor if dtype is None else tensor.to(dtype)
