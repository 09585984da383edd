"""The types the layers share: passages, and the retriever, summariser and generator protocols.

Agents, retrieval, curation, engines and recipes all speak these; keeping them here,
below every one of them, lets each import them without importing another's folder.

A retriever maps a batch of query strings to, per query, the top-k passages
ordered best first. Passages use the FlashRAG corpus convention: ``contents``
is ``"title\\ntext"``; prompts print them as ``format_docs`` does, whether an
agent shows them or UR²'s summariser reads (or falls back to) them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class Passage:
    """One retrieved passage: corpus id, ``"title\\ntext"`` contents, retrieval score."""

    id: str
    contents: str
    score: float = 0.0

    @property
    def title(self) -> str:
        return self.contents.split("\n", 1)[0]

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) == 2 else parts[0]


class Retriever(Protocol):
    """Batch of queries → top-k passages per query, best first."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


def search_by_item(
    retriever: Retriever, queries: dict[int, str], k: int
) -> dict[int, list[Passage]]:
    """One batched search for the items that queried this turn: item → its top-k passages.

    The agents keep a dict of pending queries keyed by trajectory index; this
    turns it into a single ``retriever.search`` call and maps the results back.
    """
    if not queries:
        return {}
    items = list(queries)
    results = retriever.search([queries[i] for i in items], k=k)
    return {i: list(passages) for i, passages in zip(items, results, strict=True)}


def format_doc(number: int, passage: Passage) -> str:
    """Render one passage as ``Doc n(Title: t) text`` on a single line (whitespace collapsed)."""
    title = " ".join(passage.title.split())
    return f"Doc {number}(Title: {title}) {' '.join(passage.text.split())}"


def format_docs(passages: Sequence[Passage]) -> str:
    """Render passages as ``Doc i(Title: t) text`` lines, numbered from 1 in rank order."""
    return "\n".join(format_doc(i, p) for i, p in enumerate(passages, start=1))


SummaryKind = Literal["summary", "fallback", "raw"]


@dataclass(frozen=True)
class Summary:
    """What the agent is shown for one search, and which outcome produced it.

    ``"summary"``: the summariser's summary; ``"fallback"``: its fallback message
    (the query asked for reasoning, not facts); ``"raw"``: summarising failed and
    the text is the raw documents (``format_docs``).
    """

    text: str
    kind: SummaryKind


class Summariser(Protocol):
    """(query, passages) pairs → one ``Summary`` each, in order (UR²'s summarised retrieval)."""

    def summarise(self, requests: Sequence[tuple[str, Sequence[Passage]]]) -> list[Summary]: ...


class TextGenerator(Protocol):
    """What the agents and UR²'s summariser need from a language model.

    ``chat_prompt`` renders a single user message (and optional system message)
    with the model's chat template and the assistant generation prompt, so the
    returned string can be extended with assistant text and generated from.
    ``generate`` continues each prompt and stops *after* the first occurrence
    of any stop string (the stop string is included in the returned text), at
    EOS, or after ``max_new_tokens`` tokens.
    """

    def chat_prompt(self, user: str, system: str | None = None) -> str: ...

    def generate(
        self, prompts: Sequence[str], *, max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]: ...
