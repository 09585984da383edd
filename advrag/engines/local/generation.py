"""Batched text generation with a transformers causal LM (the default back-end).

Implements ``advrag.common.types.TextGenerator``: prompts are generated together
in micro-batches by ``decoding.decode`` (their shared prefix prefilled once,
each row leaving the batch when it stops, a prompt that continues an earlier
call's sequence prefilled only past it); each continuation is cut right after
the first stop string it contains (the stop string is kept), which is what the
agents' tag protocol expects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import Tensor, nn

from advrag.common.device import pick_device
from advrag.engines.local.decoding import PREFIX_STORE_BYTES, PrefixStore, decode
from advrag.engines.weights import checkpoint_weights


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """Return ``text`` up to and including the earliest stop string (or unchanged)."""
    ends = [text.find(s) + len(s) for s in stop if s and s in text]
    return text[: min(ends)] if ends else text


def prompt_ids(tokenizer, prompts: Sequence[str], max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of ``prompts``; a prompt longer than ``max_prompt_tokens`` is refused with its
    length, never cut (the token budgets are checked before a run: ``agents.budgets``)."""
    ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    longest = max((len(row) for row in ids), default=0)
    if longest > max_prompt_tokens:
        raise ValueError(f"a prompt of {longest} tokens is longer than the generator's "
                         f"max_prompt_tokens ({max_prompt_tokens}): raise the budget of the "
                         "episode (max_seq_len) or lower max_turns, topk or max_new_tokens")
    return ids


class ChatPrompting:
    """``chat_prompt`` through ``self.tokenizer``'s chat template (shared by the back-ends;
    on its own, a tokenizer's prompts without a model)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """Render one user turn with the chat template, ready for the assistant."""
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": user})
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )


class HFGenerator(ChatPrompting):
    """Greedy or sampled generation from a transformers model, batched.

    ``temperature=0`` means greedy decoding. ``batch_size`` bounds memory: a
    call with more prompts runs in consecutive micro-batches. ``autocast``
    (e.g. ``TrainablePolicy.autocast``) wraps every ``generate`` call, so
    rollouts of an fp32 training model can sample in bf16.

    Inside ``episode()`` (an agent loop's turns), each finished row's keys and values stay
    in a ``PrefixStore`` of ``prefix_store_bytes`` (0: none), so an agent's next turn,
    which repeats its last prompt and output, prefills only its new text. The store lives
    for the episode only, so no call's output depends on calls made before it (a resumed
    run repeats the uninterrupted one), and it is emptied if the model's weights change
    within the episode (an update, a weight push, another active adapter).
    """

    def __init__(self, model, tokenizer, *, temperature: float = 0.0, top_p: float = 1.0,
                 batch_size: int = 16, max_prompt_tokens: int = 8192,
                 autocast: Callable[[], AbstractContextManager] = nullcontext,
                 prefix_store_bytes: int = PREFIX_STORE_BYTES):
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size
        self.max_prompt_tokens = max_prompt_tokens
        self.autocast = autocast
        self.generated_tokens = 0
        self.last_completion_tokens: list[int] = []
        """Tokens each completion of the last ``generate`` call got (stop string or EOS
        included, padding not)."""
        self.last_cut: list[bool] = []
        """Whether each completion of the last ``generate`` call was cut by ``max_new_tokens``
        (it reached the budget with no stop string and no EOS)."""
        self.prefix_store_bytes = prefix_store_bytes
        self.prefix_store: PrefixStore | None = None
        self._store_weights: tuple | None = None

    @contextmanager
    def episode(self) -> Iterator[None]:
        """Keep finished rows' keys and values for the calls inside (an episode's turns);
        forget them on leaving. Nested episodes share the outer one's store."""
        if self.prefix_store is not None or not self.prefix_store_bytes:
            yield
            return
        self.prefix_store = PrefixStore(self.prefix_store_bytes)
        self._store_weights = weights_state(self.model)
        try:
            yield
        finally:
            self.prefix_store = None

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        """Continue every prompt; outputs are aligned with ``prompts``."""
        outputs: list[str] = []
        self.last_completion_tokens, self.last_cut = [], []
        self._check_store()
        for start in range(0, len(prompts), self.batch_size):
            batch = list(prompts[start:start + self.batch_size])
            outputs.extend(self._generate_batch(batch, max_new_tokens, stop))
        return outputs

    def _generate_batch(self, prompts: list[str], max_new_tokens: int,
                        stop: Sequence[str]) -> list[str]:
        """One batch through ``decode`` (shared prefix once, finished rows dropped); the new
        tokens' text, cut after the first stop string."""
        tok = self.tokenizer
        ids = prompt_ids(tok, prompts, self.max_prompt_tokens)
        pad = padding_id(tok)
        with self.autocast():
            new_tokens = decode(self.model, ids, max_new_tokens=max_new_tokens, pad_id=pad,
                                eos_ids={tok.eos_token_id}, temperature=self.temperature,
                                top_p=self.top_p, stopped=stop_condition(tok, stop),
                                store=self.prefix_store)
        lengths = [sum(t != pad for t in row) for row in new_tokens]
        self.last_completion_tokens.extend(lengths)
        self.generated_tokens += sum(lengths)
        texts = tok.batch_decode(new_tokens, skip_special_tokens=True)
        self.last_cut.extend(n >= max_new_tokens and row[n - 1] != tok.eos_token_id
                             and not any(s and s in text for s in stop)
                             for n, row, text in zip(lengths, new_tokens, texts, strict=True))
        return [cut_at_stop(t, stop) for t in texts]

    def _check_store(self) -> None:
        """Inside an episode, empty the prefix store if the weights changed since it was filled."""
        if self.prefix_store is None:
            return
        weights = weights_state(self.model)
        if weights != self._store_weights:
            self.prefix_store.clear()
            self._store_weights = weights


def weights_state(model: nn.Module) -> tuple:
    """What identifies ``model``'s current weights: each parameter's storage and in-place
    version (an optimiser step or ``copy_`` bumps it) and the active adapter."""
    adapter = model.active_adapter if hasattr(model, "get_base_model") else None
    return (adapter, tuple((p.data_ptr(), p._version) for p in model.parameters()))


def padding_id(tokenizer) -> int:
    """The tokenizer's pad id, its end-of-sequence id where it has none."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def stop_condition(tokenizer, stop: Sequence[str]) -> Callable[[list[int]], bool] | None:
    """Whether new token ids contain a stop string (None without stop strings).

    A stop string that the last token completed lies within the last ``len(string)``
    tokens (each holds at least one of its characters), so only that tail is decoded.
    """
    stop = [s for s in stop if s]
    if not stop:
        return None
    window = max(len(s) for s in stop)

    def stopped(ids: list[int]) -> bool:
        tail = tokenizer.decode(ids[-window:])
        return any(s in tail for s in stop)

    return stopped


class SnapshotGenerator(HFGenerator):
    """transformers generation from a LoRA-merged copy of the policy, cast once to ``dtype``.

    Sampling an fp32 policy under CPU bf16 autocast recasts every weight at
    every decoding step; a bf16 copy sampled 1.6x faster than autocast and 2.1x
    faster than fp32 here (``bench/results/rollout_precision.json``). Like the
    vLLM engine, the copy only changes through ``push_weights``, which the
    training step calls after every update. ``adapter``: on a base shared by
    several LoRA adapters (ARR's agents), the one merged into this copy.
    ``dtype=torch.float16`` on a CPU keeps fp32 activations and packs fp16 weights
    for fbgemm (``pack_fp16_weights``).
    """

    def __init__(self, model: nn.Module, tokenizer, *, dtype: torch.dtype,
                 adapter: str | None = None, **options):
        self.dtype = dtype
        self.adapter = adapter
        super().__init__(self._copy_of(model), tokenizer, **options)

    def _copy_of(self, model: nn.Module) -> nn.Module:
        """``model`` merged and cast for sampling (fp16 weights packed on a CPU)."""
        on_cpu = next(model.parameters()).device.type == "cpu"
        if self.dtype == torch.float16 and on_cpu:
            return pack_fp16_weights(inference_copy(model, torch.float32, self.adapter))
        return inference_copy(model, self.dtype, self.adapter)

    def push_weights(self, model: nn.Module) -> None:
        """Sample from ``model``'s current weights from now on.

        The copy's weights are overwritten in place (LoRA deltas added to their
        base weights on the fly; packed fp16 weights packed again), with no new
        model built; a model whose weights do not map one to one onto the copy's
        gets a fresh copy.
        """
        targets = self.model.state_dict(keep_vars=True)
        pushed = dict.fromkeys(targets, False)
        packed = [m for m in self.model.modules() if isinstance(m, PackedFp16Linear)]
        packed_weights = {id(p) for m in packed for p in (m.weight, m.bias) if p is not None}
        written = set()
        with torch.no_grad():
            for name, weight in checkpoint_weights(model, self.adapter):
                if name not in pushed:
                    break
                pushed[name] = True
                target = targets[name]
                if id(target) in written or (id(target) in packed_weights
                                             and torch.equal(target, weight)):
                    continue  # a tied weight is written once; packing is slow: a weight LoRA
                    # leaves alone is not packed again
                target.copy_(weight)
                written.add(id(target))
        if not all(pushed.values()):
            self.model = self._copy_of(model)
            return
        repack([m for m in packed if {id(m.weight), id(m.bias)} & written])


def inference_copy(model: nn.Module, dtype: torch.dtype, adapter: str | None = None) -> nn.Module:
    """A copy of ``model`` with LoRA merged in, in ``dtype``, in eval mode (``model`` untouched).

    ``adapter`` names the one adapter to merge where the model holds several;
    None merges the active one(s).
    """
    clone = copy.deepcopy(model)
    if hasattr(clone, "merge_and_unload"):
        clone = clone.merge_and_unload(adapter_names=[adapter] if adapter else None)
    return clone.to(dtype).eval()


def pick_dtype(requested: str) -> str:
    """Resolve ``"auto"``: bfloat16 where the device models load on (``pick_device``) runs it
    natively, else float32.

    On CPUs without native bf16 (no AVX512-BF16/AMX) bf16 matmuls are emulated
    and slower than fp32, so "auto" keeps fp32 there.
    """
    if requested != "auto":
        return requested
    if pick_device() != "cpu":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return "bfloat16" if native else "float32"


PACKED_PIECE_WEIGHTS = 4 << 20
"""Most weights fbgemm packs as one matrix. Packing slows from ~70 to ~32 M weights/s a
thread once a matrix outgrows the cache (SmolLM2's 28 M-weight LM head: 0.9 s whole, 0.27 s
as 8 pieces on two threads), and pieces spread over the threads; a step multiplies by the
pieces one after the other (the head's step: 14 → 11 ms here, the same values)."""


class PackedFp16Linear(nn.Linear):
    """A linear layer computing with an fp16 copy of its weight packed for fbgemm: fp32 inputs,
    accumulation and outputs.

    A decoding step multiplies a few rows by every weight; on a CPU without native bf16,
    fp32 matmuls of so few rows run far below the peak, and fbgemm's fp16-weight kernels,
    reading half the bytes, are several times faster (docs/performance.md). The fp32
    ``weight`` stays, so pushes write it as before; ``repack`` refreshes the packed copy,
    a matrix of more than ``PACKED_PIECE_WEIGHTS`` weights in pieces of output rows.
    """

    packed: list[torch.ScriptObject]

    def pieces(self) -> list[tuple[Tensor, Tensor | None]]:
        """``(weight rows, bias)`` of each piece packed on its own (consecutive output rows)."""
        count = -(-self.weight.numel() // PACKED_PIECE_WEIGHTS)
        weights = self.weight.detach().tensor_split(count)
        biases = [None] * count if self.bias is None else self.bias.detach().tensor_split(count)
        return list(zip(weights, biases, strict=True))

    def forward(self, inputs: Tensor) -> Tensor:
        """``inputs @ weight.T + bias`` with the weight rounded to fp16."""
        outputs = [torch.ops.quantized.linear_dynamic_fp16(inputs, piece) for piece in self.packed]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)


def _pack(piece: tuple[Tensor, Tensor | None]) -> torch.ScriptObject:
    """One weight piece (and its bias) rounded to fp16 and packed for fbgemm."""
    return torch.ops.quantized.linear_prepack_fp16(*piece)


def repack(layers: Sequence[PackedFp16Linear]) -> None:
    """Pack ``layers`` again from their current weights, their pieces spread over as many
    threads as torch uses (one packing runs on one core and releases the GIL)."""
    jobs = [(layer, piece) for layer in layers for piece in layer.pieces()]
    with ThreadPoolExecutor(max_workers=torch.get_num_threads()) as pool:
        packed = list(pool.map(_pack, [piece for _, piece in jobs]))
    for layer in layers:
        layer.packed = []
    for (layer, _), piece in zip(jobs, packed, strict=True):
        layer.packed.append(piece)


def fp16_weights_supported() -> bool:
    """Whether this torch build has fbgemm's fp16-weight linear kernels (x86 CPUs)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def pack_fp16_weights(model: nn.Module) -> nn.Module:
    """Make every ``nn.Linear`` of an fp32 CPU ``model`` a ``PackedFp16Linear`` (in place);
    ``model`` itself, for sampling only (the packed weights take no gradients)."""
    if not fp16_weights_supported():
        raise RuntimeError("fp16 weights on the CPU need torch's fbgemm kernels (an x86 build); "
                           "sample in fp32 instead (rollout_backend: hf).")
    linears = [module for module in model.modules() if type(module) is nn.Linear]
    for module in linears:
        if module.weight.dtype != torch.float32 or module.weight.device.type != "cpu":
            raise ValueError(f"pack_fp16_weights takes an fp32 CPU model, got a "
                             f"{module.weight.dtype} weight on {module.weight.device}.")
    for module in linears:
        module.__class__ = PackedFp16Linear
    repack(linears)
    return model
