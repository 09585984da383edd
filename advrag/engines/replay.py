"""Record an agent loop's ``generate`` calls and replay them on the raw engine.

How close do our rollouts come to the engine they run on? ``RecordingGenerator``
wraps a rollout generator and keeps, per call, the prompts, the number of tokens
each completion got, and the seconds the call took. ``replay`` then makes the
same engine generate exactly those completion lengths for exactly those
prompts, with nothing of the loop around it: no stop strings, no parsing, no
retrieval, no re-rendered contexts (``bench/rollouts/bench_rollout_replay.py``). The
loop's tokens/s over the replay's is the share of the engine's speed the loop
keeps.

A completion's length is the number of tokens the engine sampled for it
(``last_completion_tokens``: up to its stop string or end of sequence; sampled
text does not re-tokenise to the same count), at least 1 (an immediate end of
sequence that the tokenizer pads with). The replay forces each length (end of
sequence suppressed until it is reached) and samples at the generator's
temperature.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from advrag.agents.types import GeneratorWrapper
from advrag.common.types import TextGenerator
from advrag.engines.local.decoding import decode
from advrag.engines.local.generation import HFGenerator, padding_id, prompt_ids


@dataclass
class GenerateCall:
    """One recorded ``generate`` call: what went in, how long each completion was, its time."""

    prompts: list[str]
    max_new_tokens: int
    completion_tokens: list[int]
    seconds: float

    @property
    def tokens(self) -> int:
        return sum(self.completion_tokens)


class RecordingGenerator(GeneratorWrapper):
    """A ``TextGenerator`` that passes every call to ``inner`` and records it in ``calls``."""

    def __init__(self, inner: TextGenerator):
        if not hasattr(inner, "last_completion_tokens"):
            raise TypeError(f"{type(inner).__name__} does not report its completions' token "
                            "counts (last_completion_tokens): record an engine's generator "
                            "(HFGenerator, SnapshotGenerator, VLLMGenerator).")
        super().__init__(inner)
        self.calls: list[GenerateCall] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        started = time.perf_counter()
        outputs = self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)
        seconds = time.perf_counter() - started
        lengths = [max(n, 1) for n in self.inner.last_completion_tokens]
        self.calls.append(GenerateCall(list(prompts), max_new_tokens, lengths, seconds))
        return outputs

    @property
    def seconds(self) -> float:
        """Seconds spent inside the wrapped generator."""
        return sum(call.seconds for call in self.calls)

    @property
    def tokens(self) -> int:
        """Completion tokens of every recorded call."""
        return sum(call.tokens for call in self.calls)


def _replay_hf(generator: HFGenerator, call: GenerateCall) -> int:
    """The call's prompts through ``decode`` in the generator's micro-batches, each row
    forced to its recorded length (end of sequence suppressed, no stop strings); the tokens
    the engine produced."""
    tok, size = generator.tokenizer, generator.batch_size
    pad = padding_id(tok)
    produced = 0
    for start in range(0, len(call.prompts), size):
        ids = prompt_ids(tok, call.prompts[start:start + size], generator.max_prompt_tokens)
        with generator.autocast():
            new = decode(generator.model, ids, max_new_tokens=call.completion_tokens[start:start + size],
                         pad_id=pad, eos_ids={tok.eos_token_id}, temperature=generator.temperature,
                         top_p=generator.top_p, ignore_eos=True)
        produced += sum(len(row) for row in new)
    return produced


def _replay_vllm(generator, call: GenerateCall) -> int:
    """The call's prompts as token ids, one request each with its own forced length."""
    from vllm import SamplingParams

    ids = prompt_ids(generator.tokenizer, call.prompts, generator.max_prompt_tokens)
    sampling = generator.temperature > 0
    params = [SamplingParams(temperature=generator.temperature if sampling else 0.0,
                             top_p=generator.top_p if sampling else 1.0, max_tokens=length,
                             min_tokens=length, ignore_eos=True)
              for length in call.completion_tokens]
    outputs = generator.llm.generate([{"prompt_token_ids": p} for p in ids], params,
                                     use_tqdm=False)
    return sum(len(out.outputs[0].token_ids) for out in outputs)


def _replayer(generator: TextGenerator) -> Callable[[TextGenerator, GenerateCall], int]:
    """The replay function for ``generator``'s engine."""
    if isinstance(generator, HFGenerator):
        return _replay_hf
    if hasattr(generator, "llm"):  # VLLMGenerator, imported lazily: vLLM is optional
        return _replay_vllm
    raise TypeError(f"no raw replay for {type(generator).__name__}: replay works on the "
                    "transformers (HFGenerator, SnapshotGenerator) and vLLM generators.")


def reset_prefix_cache(generator: TextGenerator) -> None:
    """Empty a vLLM engine's prefix cache (other engines keep none across calls)."""
    if hasattr(generator, "llm"):
        generator.llm.reset_prefix_cache()


def replay(generator: TextGenerator, calls: Sequence[GenerateCall]) -> tuple[float, int]:
    """Seconds the raw engine of ``generator`` takes for the recorded ``calls`` in order, and
    the tokens it produced.

    A vLLM engine's prefix cache is emptied first, so the replay reuses KV only
    across its own calls, as the loop does (``reset_prefix_cache`` before it).
    """
    run = _replayer(generator)
    reset_prefix_cache(generator)
    started = time.perf_counter()
    produced = sum(run(generator, call) for call in calls)
    return time.perf_counter() - started, produced
