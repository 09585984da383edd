"""Batched decoding for transformers causal LMs: a shared prompt prefix prefilled once, rows
prefilled in groups of similar length, finished rows dropped from the batch.

``model.generate`` prefills every prompt whole, padded to the longest, and decodes every
row until the batch's last one stops. An agent's batch is the opposite of that: every
prompt starts with the same instructions, contexts differ in length by the documents
they hold, and most rows stop long before the longest one (a Search-R1 turn of 32 rows
on SmolLM2: 24 new tokens a row on average, 80 at most). Here:

- the longest token prefix that every prompt shares is prefilled once, for one row, and
  its keys and values are copied to every row;
- each row's own tokens follow it, prefilled in groups of rows of similar length
  (``length_groups``), each padded only to its own longest row; the padding is masked
  and positions skip it, so every token sees exactly the context it would see alone;
- decoding writes each new token's keys and values in place into buffers with room for
  it (``_BufferedLayer``), instead of copying the whole cache every step;
- after each step, rows that produced an end-of-sequence token, met their stop
  condition or reached their length leave the batch with their cached keys and values,
  so the next step computes only the rows still running;
- with a ``PrefixStore``, a row that leaves keeps its keys and values there, and a later
  prompt that starts with its tokens (an agent's next turn: its last prompt, its output,
  then new text) prefills only what follows them.

Tokens are chosen as ``generate`` chooses them: the argmax at temperature 0; else the
logits divided by the temperature, cut to the smallest set of tokens whose probability
reaches ``top_p`` (nucleus sampling), and one token drawn from torch's global generator
(the same distribution as ``generate``'s, other draws for a seed: ``draw_from``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicLayer

MIN_SHARED_PREFIX = 16
"""Fewest shared prompt tokens worth a prefill of their own."""

PREFILL_TOKENS = 4096
"""Padded tokens per prefill group (rows of similar length; see ``length_groups``)."""

PREFIX_STORE_BYTES = 2 << 30
"""Default size of a ``PrefixStore`` (SmolLM2-135M in fp32 caches 46 KB a token: 46k tokens)."""

Layers = list[tuple[Tensor, Tensor]]
"""Each layer's cached ``(keys, values)``, ``(rows, kv heads, tokens, head size)``."""


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens at the start of every prompt, leaving every prompt at least one token of its own
    (the last prompt token's logits choose the first new token)."""
    shortest = min(len(p) for p in prompts)
    return min([shortest - 1, *(_common_length(prompts[0], p) for p in prompts[1:])])


@dataclass
class _Head:
    """The first ``length`` tokens of a prompt whose keys and values are known (one row)."""

    length: int
    layers: Layers | None


class PrefixStore:
    """Keys and values of sequences decoded earlier, one row each, for prompts that start
    with them.

    An agent's next turn is its last prompt, its output and new text (documents, a hint):
    with the finished row's keys and values at hand, only the new text needs a prefill.
    ``take`` hands each prompt the longest stored start of it (a token prefix: text that
    re-tokenises differently at the join simply matches less) and drops the entries it
    used, since the rows' new sequences, stored when they end, extend them. Entries are
    kept oldest first within ``budget_bytes``. Keys and values are only valid for the
    weights that computed them: the owner clears the store when they change.
    """

    def __init__(self, budget_bytes: int = PREFIX_STORE_BYTES):
        self.budget_bytes = budget_bytes
        self._entries: list[tuple[np.ndarray, Layers, int]] = []

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values held."""
        return sum(size for _, _, size in self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries = []

    def add(self, tokens: Sequence[int], layers: Layers) -> None:
        """Keep ``layers`` (one row) as the keys and values of ``tokens``, dropping the oldest
        entries beyond the budget."""
        size = sum(k.nbytes + v.nbytes for k, v in layers)
        if size > self.budget_bytes:
            return
        self._entries.append((np.asarray(tokens), layers, size))
        while self.nbytes > self.budget_bytes:
            self._entries.pop(0)

    def take(self, prompts: Sequence[Sequence[int]]) -> list[_Head]:
        """Per prompt, its longest stored start (leaving it one token of its own), or an empty
        head where that is shorter than ``MIN_SHARED_PREFIX``; the entries used are dropped."""
        heads, used = [], set()
        for prompt in prompts:
            ids = np.asarray(prompt[:-1])
            best, chosen = 0, None
            for index, (tokens, _, _) in enumerate(self._entries):
                length = _common_length(tokens, ids)
                if length > best:
                    best, chosen = length, index
            if chosen is None or best < MIN_SHARED_PREFIX:
                heads.append(_Head(0, None))
                continue
            used.add(chosen)
            layers = self._entries[chosen][1]
            heads.append(_Head(best, [(k[:, :, :best], v[:, :, :best]) for k, v in layers]))
        self._entries = [e for index, e in enumerate(self._entries) if index not in used]
        return heads


def choose_tokens(logits: Tensor, temperature: float, top_p: float) -> Tensor:
    """One token per row of ``logits (rows, vocab)``: greedy at temperature 0, else nucleus
    sampling at ``temperature`` (the smallest most-probable set reaching ``top_p``)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature
    if top_p < 1.0:
        ordered, order = scaled.sort(dim=-1, descending=True)
        before = ordered.softmax(dim=-1).cumsum(dim=-1) - ordered.softmax(dim=-1)
        ordered = ordered.masked_fill(before >= top_p, float("-inf"))  # the first always stays
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, ordered)
    return draw_from(scaled.softmax(dim=-1))


def draw_from(probs: Tensor) -> Tensor:
    """One index per row of ``probs (rows, vocab)``, drawn with those probabilities from torch's
    global generator: the first index whose cumulative probability exceeds a uniform draw.

    One random number a row, where ``torch.multinomial`` draws one per vocabulary entry (21 ms
    against 1.5 ms for 16 rows of SmolLM2's 49k tokens here:
    ``bench/rollouts/bench_sampling.py``). The sums run in fp64 and are divided by their total,
    so the last one is exactly 1 and above every draw, and an index of probability 0 (its sum equals the one before) is never chosen.
    """
    sums = probs.double().cumsum(dim=-1)
    sums /= sums[:, -1:].clone()
    uniform = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device)
    return torch.searchsorted(sums, uniform, right=True).squeeze(-1)


class _BufferedLayer(DynamicLayer):
    """A layer's cached keys and values in buffers with room to grow.

    transformers' own layer concatenates every new token onto the whole cache, a copy of all
    of it per layer per decoding step (30 % of a SmolLM2 step over 12 rows of 800 tokens);
    here a step writes its token in place and the layer hands out views of the filled part.
    """

    def __init__(self, keys: Tensor, values: Tensor, reserve: int):
        super().__init__()
        self.reserve = reserve
        self._keys, self._values = self._with_room(keys, values, keys.shape[-2] + reserve)
        self._expose(keys.shape[-2])
        self.device, self.is_initialized = keys.device, True

    @staticmethod
    def _with_room(keys: Tensor, values: Tensor, capacity: int) -> tuple[Tensor, Tensor]:
        """Buffers of ``capacity`` positions starting with ``keys`` and ``values``."""
        rows, heads, length, _ = keys.shape
        buffers = []
        for filled in (keys, values):
            buffer = filled.new_zeros(rows, heads, capacity, filled.shape[-1])
            buffer[:, :, :length] = filled
            buffers.append(buffer)
        return buffers[0], buffers[1]

    def _expose(self, length: int) -> None:
        """Hand out the first ``length`` positions as ``keys`` and ``values`` (views)."""
        self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs
               ) -> tuple[Tensor, Tensor]:
        """Write the new positions after the filled ones (growing the buffers only when
        full); all keys and values so far."""
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            self._keys, self._values = self._with_room(self.keys, self.values, end + self.reserve)
        self._keys[:, :, start:end] = key_states
        self._values[:, :, start:end] = value_states
        self._expose(end)
        return self.keys, self.values

    def batch_select_indices(self, indices: Tensor) -> None:
        """Keep the rows ``indices`` (the rows still decoding), buffers included."""
        length = self.keys.shape[-2]
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._expose(length)


def _cache_of(layers: Layers, reserve: int) -> Cache:
    """A cache holding each layer's ``(keys, values)``, with room for ``reserve`` more tokens."""
    return Cache(layers=[_BufferedLayer(keys, values, reserve) for keys, values in layers])


def _layers_of(cache: Cache) -> Layers:
    """Each layer's cached ``(keys, values)``."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _row_of(cache: Cache, mask: Tensor, index: int) -> Layers:
    """Batch row ``index``'s cached keys and values without its padding (one row, a copy)."""
    real = mask[index].bool()
    return [(keys[index:index + 1, :, real], values[index:index + 1, :, real])
            for keys, values in _layers_of(cache)]


class _Forward:
    """``model``'s forward with a KV cache, under this transformers release's argument names
    (``cache`` from 5.2x, ``past_key_values`` before), keeping only the last position's logits."""

    def __init__(self, model: nn.Module):
        self.model = model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        names = inspect.signature(base.forward).parameters
        self.cache_name = "cache" if "cache" in names else "past_key_values"

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                 cache: Cache) -> Tensor:
        """Logits ``(rows, vocab)`` after the last of ``input_ids``; ``cache`` grows in place."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, use_cache=True, logits_to_keep=1,
                         **{self.cache_name: cache})
        return out.logits[:, -1, :]


def length_groups(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Row indices in groups of similar length, longest first: a group grows while its rows,
    padded to its first (longest) one, stay within ``budget`` tokens (one row at least)."""
    order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    groups: list[list[int]] = []
    for row in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


class _Prefill:
    """The prompts' prefill: each row's known head (a ``PrefixStore`` entry, else the prefix
    its prompt shares with the others, prefilled once), then each group of rows of similar
    length on its own (padded only to its own longest row), merged into one batch.

    In the batch, row ``r``'s columns are ``[padding | its head | padding | its own tokens]``;
    the padding is masked, and positions count only real tokens.
    """

    def __init__(self, forward: _Forward, prompts: Sequence[Sequence[int]], pad_id: int,
                 budget: int, device: torch.device, store: PrefixStore | None = None):
        self.forward, self.pad_id, self.budget, self.device = forward, pad_id, budget, device
        self.heads = store.take(prompts) if store is not None else [_Head(0, None)] * len(prompts)
        self._share_prefix(prompts)
        self.own = [list(p[head.length:]) for p, head in zip(prompts, self.heads, strict=True)]

    def _share_prefix(self, prompts: Sequence[Sequence[int]]) -> None:
        """Give the rows without a stored head the prefix they share, prefilled once for one row
        (when at least two of them share ``MIN_SHARED_PREFIX`` tokens)."""
        rows = [row for row, head in enumerate(self.heads) if head.layers is None]
        if len(rows) < 2:
            return
        shared = shared_prefix_length([prompts[row] for row in rows])
        if shared < MIN_SHARED_PREFIX:
            return
        ids = torch.tensor([list(prompts[rows[0]][:shared])], device=self.device)
        cache = Cache(layer_class_to_replicate=DynamicLayer)
        self.forward(ids, torch.ones_like(ids), torch.arange(shared, device=self.device)[None],
                     cache)
        head = _Head(shared, _layers_of(cache))
        for row in rows:
            self.heads[row] = head

    def run(self, reserve: int) -> tuple[Tensor, Cache, Tensor, Tensor]:
        """``(logits, cache, mask, positions)``: the next token's logits per row, the cache
        with room for ``reserve`` tokens, the mask over its columns, the next positions."""
        rows = len(self.own)
        heads_end = max(head.length for head in self.heads)
        width = heads_end + max(len(p) for p in self.own)
        mask = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        logits, layers = None, []
        for group in length_groups([len(p) for p in self.own], self.budget):
            part_logits, part_layers, part_mask, head_width = self._group(group)
            if logits is None:
                logits = part_logits.new_empty(rows, part_logits.shape[-1])
                layers = [tuple(t.new_zeros(rows, t.shape[1], width, t.shape[-1]) for t in kv)
                          for kv in part_layers]
            index, own = torch.tensor(group, device=self.device), part_mask.shape[1] - head_width
            logits[index] = part_logits
            mask[index, heads_end - head_width:heads_end] = part_mask[:, :head_width]
            mask[index, width - own:] = part_mask[:, head_width:]
            for batch_kv, part_kv in zip(layers, part_layers, strict=True):
                for whole, part in zip(batch_kv, part_kv, strict=True):
                    whole[index, :, heads_end - head_width:heads_end] = part[:, :, :head_width]
                    whole[index, :, width - own:] = part[:, :, head_width:]
        return logits, _cache_of(layers, reserve), mask, mask.sum(dim=1)

    def _group(self, group: list[int]) -> tuple[Tensor, Layers, Tensor, int]:
        """One group's own tokens, left-padded to its longest, behind its rows' heads (each
        left-padded to the longest): its logits, each layer's keys and values, the mask over
        its columns and the width of its heads' part."""
        own = [self.own[row] for row in group]
        heads = [self.heads[row] for row in group]
        width = max(len(p) for p in own)
        head_width = max(head.length for head in heads)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in own], device=self.device)
        mask = torch.tensor([[0] * (head_width - head.length) + [1] * head.length
                             + [0] * (width - len(p)) + [1] * len(p)
                             for head, p in zip(heads, own, strict=True)], device=self.device)
        lengths = torch.tensor([head.length for head in heads], device=self.device)
        positions = (lengths[:, None] + mask[:, head_width:].cumsum(dim=1) - 1).clamp(min=0)
        if head_width:
            cache = _cache_of(_stacked_heads(heads, head_width), reserve=0)
        else:
            cache = Cache(layer_class_to_replicate=DynamicLayer)
        logits = self.forward(ids, mask, positions, cache)
        return logits, _layers_of(cache), mask, head_width


def _stacked_heads(heads: Sequence[_Head], width: int) -> Layers:
    """The heads' keys and values as one batch, each row left-padded with zeros to ``width``."""
    template = next(head.layers for head in heads if head.layers is not None)
    stacked = [tuple(t.new_zeros(len(heads), t.shape[1], width, t.shape[-1]) for t in kv)
               for kv in template]
    for row, head in enumerate(heads):
        if head.layers is None:
            continue
        for batch_kv, head_kv in zip(stacked, head.layers, strict=True):
            for whole, part in zip(batch_kv, head_kv, strict=True):
                whole[row, :, width - head.length:] = part[0]
    return stacked


@torch.no_grad()
def decode(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int | Sequence[int],
    pad_id: int,
    eos_ids: Collection[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
    stopped: Callable[[list[int]], bool] | None = None,
    ignore_eos: bool = False,
    prefill_tokens: int = PREFILL_TOKENS,
    store: PrefixStore | None = None,
) -> list[list[int]]:
    """New token ids for every prompt (token ids), aligned with ``prompts``.

    A row ends after an ``eos_ids`` token (kept; with ``ignore_eos`` the end of sequence is
    never chosen), when ``stopped(its new ids)`` is true, or at its ``max_new_tokens`` (one
    number for all rows, or one per row). ``prefill_tokens``: the padded size of a prefill
    group (``length_groups``). ``store``: where prompts find known heads and finished rows
    leave their keys and values (``PrefixStore``; its keys and values must come from
    ``model``'s current weights).
    """
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token to condition on")
    limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) \
        else list(max_new_tokens)
    outputs: list[list[int]] = [[] for _ in prompts]
    live = [row for row, limit in enumerate(limits) if limit > 0]
    if not live:
        return outputs
    device = next(model.parameters()).device
    banned = torch.tensor(sorted(eos_ids), device=device) if ignore_eos else None
    forward = _Forward(model)
    prefill = _Prefill(forward, [prompts[r] for r in live], pad_id, prefill_tokens, device, store)
    logits, cache, mask, positions = prefill.run(reserve=max(limits[r] for r in live))
    while True:
        if banned is not None:
            logits[:, banned] = float("-inf")
        tokens = choose_tokens(logits, temperature, top_p)
        keep = []
        for index, (row, token) in enumerate(zip(live, tokens.tolist(), strict=True)):
            outputs[row].append(token)
            done = (token in eos_ids and not ignore_eos) or len(outputs[row]) >= limits[row] \
                or (stopped is not None and stopped(outputs[row]))
            if not done:
                keep.append(index)
            elif store is not None:
                store.add(list(prompts[row]) + outputs[row][:-1], _row_of(cache, mask, index))
        if not keep:
            return outputs
        if len(keep) < len(live):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, positions, tokens = mask[index], positions[index], tokens[index]
            live = [live[i] for i in keep]
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        logits = forward(tokens[:, None], mask, positions[:, None], cache)
        positions = positions + 1
