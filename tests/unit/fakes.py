"""Test doubles for the agent loops: a scripted TextGenerator and a keyword retriever."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from advrag.common.types import Passage


def cut_after_stop(text: str, stop: Sequence[str]) -> str:
    """Truncate just after the earliest stop string, as the TextGenerator protocol requires."""
    ends = [text.find(s) + len(s) for s in stop if s and s in text]
    return text[: min(ends)] if ends else text


class ScriptedGenerator:
    """Continues each prompt with the canned text of the FIRST rule whose key it contains.

    Rules are checked in insertion order, so list the most specific keys first.
    Records every ``generate`` call (prompts, stop strings) to check batching.
    """

    def __init__(self, rules: Mapping[str, str], default: str = "I do not know."):
        self.rules = dict(rules)
        self.default = default
        self.calls: list[list[str]] = []
        self.stops: list[tuple[str, ...]] = []

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        head = f"<|system|>{system}\n" if system else ""
        return f"{head}<|user|>{user}\n<|assistant|>"

    def generate(
        self, prompts: Sequence[str], *, max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        self.calls.append(list(prompts))
        self.stops.append(tuple(stop))
        return [cut_after_stop(self._pick(p), stop) for p in prompts]

    def _pick(self, prompt: str) -> str:
        return next((out for key, out in self.rules.items() if key in prompt), self.default)

    @property
    def batch_sizes(self) -> list[int]:
        return [len(c) for c in self.calls]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


class KeywordRetriever:
    """Ranks a handful of passages by word overlap with the query (ties: corpus order)."""

    def __init__(self, passages: Sequence[Passage]):
        self.passages = list(passages)
        self.calls: list[list[str]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append(list(queries))
        return [self._top(q, k) for q in queries]

    def _top(self, query: str, k: int) -> list[Passage]:
        words = _words(query)
        scored = sorted(
            enumerate(self.passages), key=lambda ip: (-len(words & _words(ip[1].contents)), ip[0])
        )
        return [
            Passage(p.id, p.contents, float(len(words & _words(p.contents)))) for _, p in scored[:k]
        ]


CORPUS = [
    Passage("p1", "Hamlet\nHamlet is a tragedy written by William Shakespeare."),
    Passage("p2", "Paris\nParis is the capital and largest city of France."),
    Passage("p3", "Everest\nMount Everest is the highest mountain above sea level."),
    Passage("p4", "Python\nPython is a programming language created by Guido van Rossum."),
]
