"""Causal attention for bf16 updates on CPUs with AVX512-BF16: forward and backward by blocks,
their products on AMX tiles where the CPU has them, else on AVX512-BF16 dot products.

SDPA's CPU flash kernels run at ~80–320 GFLOP/s forward and ~60–150 backward on
the AMX CPU (with the backward, a quarter of the eager LoRA update on Search-R1
rows, two fifths of the compiled one), and on the AVX512-BF16 CPU (no AMX) take
about half of an eager LoRA update. ``causal_attention.cpp`` computes both by
blocks: on AMX the forward 1.3–1.7× aten's flash forward for 214–1,142 tokens,
the backward 2.4–3.9× its backward for 256–1,024 tokens; without AMX forward and
backward together 2.0× aten's at 256 tokens, 2.7× at 1,024; errors against fp32
no larger than SDPA's (docs/performance.md). ``attention_forward`` is a transformers
attention function (``ATTENTION_NAME``) that takes what the kernels cover — bf16
(or bf16 autocast) on a CPU with AVX512-BF16, head size 64, causal without a
mask, gradients needed — and hands everything else to transformers' SDPA
function. Both halves are torch custom ops, so compiled updates keep them as
opaque calls.

Packed rows: a forward may lay several sequences one after another along the
length axis (one batch row, positions restarting at each) and pass their bounds
as ``cu_seq_lens_q`` (transformers' name for them, ``[0, end₁, …, total]``);
each sequence then attends causally within itself only. The kernels take the
bounds themselves; elsewhere each sequence runs SDPA on its own. Packing spares
the padding a batch of unequal rows computes (``logprobs.scored_logits``).

The kernel is built on first use with ``torch.utils.cpp_extension`` (about 40 s,
cached per Python environment under ``$TORCH_EXTENSIONS_DIR``, else
``~/.cache/advrag/torch_extensions``); ``kernel()`` is None where it cannot be
built or run (no AVX512-BF16, no C++ compiler), and attention then stays SDPA's.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

ATTENTION_NAME = "advrag_bf16_blocks"
HEAD_SIZE = 64
SOURCE = Path(__file__).with_name("causal_attention.cpp")
log = logging.getLogger(__name__)


def kernel_cpu() -> bool:
    """Whether this CPU runs AVX512-BF16, the kernels' instructions, as torch detects it, and
    torch runs its own AVX-512 kernels here (``ATEN_CPU_CAPABILITY=avx2`` holds a run to an
    AVX2-only CPU's kernels: these are held back with torch's)."""
    return (torch.cpu._is_avx512_bf16_supported()
            and torch.backends.cpu.get_cpu_capability() == "AVX512")


@functools.cache
def amx_tiles() -> bool:
    """Whether the kernels multiply their blocks on AMX tiles: where the CPU has them (AMX also
    needs the OS to grant its tile state, which torch requests), else on AVX512-BF16 dot
    products."""
    return torch.cpu._is_amx_tile_supported()


@functools.cache
def kernel():
    """The compiled kernels (forward and backward), or None where they cannot run here."""
    if not kernel_cpu() or shutil.which(os.environ.get("CXX", "c++")) is None:
        return None  # torch.utils.cpp_extension builds with $CXX, else c++
    from torch.utils.cpp_extension import load

    print("bf16 attention: loading the kernels (compiled on this machine's first use, "
          "40-55 s, then cached)", flush=True)
    flags = ["-O3", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
             "-mavx512bf16", "-mfma", "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512"]
    directory = build_directory()
    try:
        with build_lock(directory):
            return load("advrag_causal_attention", [str(SOURCE)], extra_cflags=flags,
                        extra_ldflags=["-fopenmp"], build_directory=str(directory))
    except (RuntimeError, OSError) as error:  # a compiler or toolchain that cannot build it
        log.warning("bf16 attention kernels unavailable, attention stays SDPA's: %s", error)
        return None


def build_directory() -> Path:
    """Where this Python environment builds the kernels: a directory of its own under
    ``$TORCH_EXTENSIONS_DIR`` (else ``~/.cache/advrag/torch_extensions``). Each checkout's
    build writes its own paths into the build file, so a shared directory would be rebuilt
    whenever another checkout loaded the kernels."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache/advrag/torch_extensions"
    environment = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    directory = Path(root) / f"advrag_causal_attention-{environment}"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold an OS lock on ``directory`` while the kernels build there; the OS releases it when
    its process ends, however it ends. torch's own lock is a file that a build killed midway
    leaves behind, and every later load then waits on it forever without a word; holding this
    lock, such a file is stale, so it is removed (with a warning)."""
    with open(directory / "advrag-build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        stale = directory / "lock"
        if stale.exists():
            log.warning("bf16 attention: removing %s, left by a kernel build that did not "
                        "finish", stale)
            stale.unlink()
        yield  # closing the file releases the lock


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float,
                     bounds: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Causal attention of bf16 ``(batch, heads, len, 64)`` tensors on the kernels, within each
    sequence of ``bounds`` (int64 ``[0, …, len]``; None: the whole length is one): the output,
    laid out as ``(batch, len, heads, 64)``, and each query's log-sum-exp ``(batch, heads, len)``
    fp32. Differentiable in q, k and v."""
    if bounds is None:
        bounds = torch.arange(2, device=q.device) * q.shape[2]
    return sequence_attention(q, k, v, bounds, scale)


# Named anew when its inputs or its outputs' layout change: inductor's compile caches key on op
# names, not on fake kernels, and code compiled against the old op would fail its checks.
@torch.library.custom_op("advrag::sequence_attention_forward", mutates_args=())
def sequence_attention(q: Tensor, k: Tensor, v: Tensor, bounds: Tensor,
                       scale: float) -> tuple[Tensor, Tensor]:
    """``causal_attention`` with its bounds given (the C++ kernel)."""
    return tuple(kernel().causal_attention_forward(q, k, v, bounds, scale, amx_tiles()))


@sequence_attention.register_fake
def _(q, k, v, bounds, scale):
    batch, heads, length, head_size = q.shape
    out = q.new_empty(batch, length, heads, head_size).transpose(1, 2)
    return out, q.new_empty(batch, heads, length, dtype=torch.float32)


@torch.library.custom_op("advrag::sequence_attention_backward", mutates_args=())
def sequence_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, grad_out: Tensor,
                                logsumexp: Tensor, bounds: Tensor,
                                scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``sequence_attention`` for q, k and v (the C++ kernel)."""
    return tuple(kernel().causal_attention_backward(q, k, v, out, grad_out.contiguous(),
                                                    logsumexp, bounds, scale, amx_tiles()))


@sequence_attention_backward.register_fake
def _(q, k, v, out, grad_out, logsumexp, bounds, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _save(ctx, inputs, output):
    q, k, v, bounds, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, bounds, *output)


def _backward(ctx, grad_out, _grad_logsumexp):
    q, k, v, bounds, out, logsumexp = ctx.saved_tensors
    return *sequence_attention_backward(q, k, v, out, grad_out, logsumexp, bounds,
                                        ctx.scale), None, None


sequence_attention.register_autograd(_backward, setup_context=_save)


def covered(query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
            dropout: float, is_causal: bool | None) -> bool:
    """Whether ``attention_forward`` runs the kernels for this call (installed only where
    ``kernel()`` is available, so not asked here: compiled layers trace this check)."""
    bf16 = query.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
    return (query.device.type == "cpu" and bf16 and query.shape[-1] == HEAD_SIZE
            and attention_mask is None and dropout == 0.0 and is_causal is not False
            and query.shape[2] == key.shape[2] > 1 and torch.is_grad_enabled()
            and (query.requires_grad or key.requires_grad or value.requires_grad))


def attention_forward(module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Tensor | None, dropout: float = 0.0,
                      scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """A transformers attention function: ``causal_attention`` where ``covered``, else SDPA's;
    packed sequences (``kwargs["cu_seq_lens_q"]``, see the module's docstring) attend each within
    itself either way.

    Returns ``(output (batch, len, heads, head size), None)`` as transformers expects.
    """
    bounds = kwargs.pop("cu_seq_lens_q", None)
    if not covered(query, key, value, attention_mask, dropout, is_causal):
        return _sdpa_by_sequence(module, query, key, value, attention_mask, bounds,
                                 dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs)
    q, k, v = (x.to(torch.bfloat16) for x in (query, key, value))
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # grouped-query attention: every query head gets its key/value head
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scale = scaling if scaling is not None else HEAD_SIZE ** -0.5
    with torch.autocast("cpu", enabled=False):
        out, _ = causal_attention(q, k, v, scale, bounds)
    return out.transpose(1, 2).contiguous(), None


def _sdpa_by_sequence(module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Tensor | None, bounds: Tensor | None, **kwargs):
    """transformers' SDPA attention, run on each packed sequence of ``bounds`` on its own (causal,
    no mask), or on the whole input where there are no bounds."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    cuts = bounds.tolist()
    outputs = [sdpa_attention_forward(module, query[:, :, start:end], key[:, :, start:end],
                                      value[:, :, start:end], None, **kwargs)[0]
               for start, end in zip(cuts, cuts[1:])]
    return torch.cat(outputs, dim=1), None


@contextmanager
def amx_attention(model: torch.nn.Module) -> Iterator[None]:
    """``model`` (transformers, peft-wrapped or not) attending through ``attention_forward`` for
    the body where it runs SDPA attention with heads of 64 and the kernels are available (built
    here on first use; on AMX tiles or AVX512-BF16 dot products, ``amx_tiles``); unchanged
    otherwise."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if (getattr(config, "_attn_implementation", None) != "sdpa" or head_size != HEAD_SIZE
            or kernel() is None):
        yield
        return
    AttentionInterface.register(ATTENTION_NAME, attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)  # masks as for SDPA, not none
    base.set_attn_implementation(ATTENTION_NAME)
    try:
        yield
    finally:
        base.set_attn_implementation("sdpa")
