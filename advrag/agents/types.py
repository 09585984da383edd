"""Shared episode types: who produced each piece of text, and what an episode is.

A trajectory is a list of segments. Each segment records its ``source`` so that
the RL engine can build loss masks later: only ``"policy"`` text was sampled by
the agent being trained; ``"prompt"`` (instructions, question), ``"env"``
(retrieved passages, hints) and ``"peer"`` (the other agent's messages) get
loss-mask 0. ``"probe"`` is REX-RAG's inserted exploration prompt: not sampled by
the policy, but learned from (as REX-RAG's release does), with its own
behaviour probability in the policy correction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Literal

from advrag.common.types import TextGenerator

Source = Literal["prompt", "policy", "env", "peer", "probe"]


@dataclass
class Segment:
    """A run of text in a trajectory and who produced it."""

    text: str
    source: Source


@dataclass(frozen=True)
class ProbeOrigin:
    """A probe's provenance: the index (in its rollout batch) of the policy trajectory it
    was cloned from, the index of its inserted-prompt segment, and the pool prompt's index."""

    origin: int
    segment: int
    prompt: int


@dataclass
class Trajectory:
    """One agent's context as it grows: segments in order, plus episode facts."""

    segments: list[Segment] = field(default_factory=list)
    answer: str | None = None
    n_searches: int = 0
    n_turns: int = 0
    format_errors: int = 0
    retrieved_ids: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    search_ids: list[tuple[str, ...]] = field(default_factory=list)
    """The passage ids each search returned, one tuple per query (``retrieved_ids`` flat)."""
    fallbacks: int = 0
    """Searches answered with the summariser's fallback message (UR²'s fallback faults)."""
    cut_turns: int = 0
    """Generations that ``max_new_tokens`` cut before a stop string or EOS (``budget_cuts``)."""
    probe: ProbeOrigin | None = None
    """Set on a REX-RAG probe: where it was cloned from and which prompt it inserted."""

    def add(self, text: str, source: Source) -> None:
        if text:
            self.segments.append(Segment(text, source))

    def to_json(self) -> dict:
        """Every field, as JSON values (``from_json`` reads it back equal)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, row: dict) -> Trajectory:
        """The trajectory ``to_json`` wrote."""
        return cls(**{**row, "segments": [Segment(**s) for s in row["segments"]],
                      "search_ids": [tuple(ids) for ids in row["search_ids"]],
                      "probe": None if row["probe"] is None else ProbeOrigin(**row["probe"])})

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def policy_text(self) -> str:
        return "".join(s.text for s in self.segments if s.source == "policy")


@contextmanager
def one_episode(*generators: TextGenerator) -> Iterator[None]:
    """The turns of one batch of episodes: generators that offer ``episode()`` (the
    transformers back-end's prefix store) may reuse what earlier turns computed inside it,
    and forget it after, so no episode depends on the ones before it."""
    with ExitStack() as stack:
        for generator in generators:
            episode = getattr(generator, "episode", None)
            if episode is not None:
                stack.enter_context(episode())
        yield


class GeneratorWrapper:
    """A ``TextGenerator`` that passes every call to ``inner``: the base of wrappers that
    watch a generator (time it, record its calls) and override ``generate`` only."""

    def __init__(self, inner: TextGenerator):
        self.inner = inner

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return self.inner.chat_prompt(user, system)

    def episode(self) -> AbstractContextManager:
        """The wrapped generator's episode scope (``one_episode``)."""
        return one_episode(self.inner)

    @property
    def last_cut(self) -> list[bool] | None:
        """The wrapped generator's cut flags of its last call, if it reports them (``budget_cuts``)."""
        return getattr(self.inner, "last_cut", None)


def budget_cuts(generator: TextGenerator, n: int) -> list[bool]:
    """Which of the ``n`` completions of ``generator``'s last call ``max_new_tokens`` cut: its
    ``last_cut`` where it reports one (the engines' generators do), else none of them."""
    cut = getattr(generator, "last_cut", None)
    if cut is None:
        return [False] * n
    cut = list(cut)
    if n and len(cut) != n:
        raise ValueError(f"{type(generator).__name__} reported {len(cut)} cut flags for "
                         f"{n} completions")
    return cut
