"""UR²'s LLM-summarised retrieval (§3.1.1, App. C.4, D.3): top-k documents → a concise summary.

An ``LLMSummariser`` answers each (query, passages) pair with one ``Summary``:
- ``"summary"``: the text after the output's "Final Information" label;
- ``"fallback"``: the summariser judged that the query asks for computation or
  reasoning rather than facts; the text is ``SUMMARY_FALLBACK_MESSAGE`` exactly,
  whatever wording of it the model wrote (a clear fragment is enough);
- ``"raw"``: the output was empty (an endpoint request that timed out returns
  ``""``), had no label, or an empty body after it; the text
  is the raw documents as the agents print them (``format_docs``).
Many pairs go through ONE ``generate`` call; identical pairs are generated once.

Summaries and fallbacks are cached in ``<cache_dir>/summaries.sqlite`` by the
SHA-256 of (summariser name, prompt version, token budget, query, passage ids).
Raw outcomes are not cached, so a transient failure is retried next time. Each
batch's new entries go in one sqlite transaction: a crash leaves the old cache
or the new one, never half an entry (what ``common.fileio``'s rename gives
single files). ``stats`` counts every request by outcome.

How this departs from the paper:
- the prompt is ours, after D.3's "summarizing other documents during training"
  prompt, WITHOUT its "Previous Reasoning Steps" input: a summary then depends
  only on (query, passages), so rollouts that issue the same query share it;
- the paper's summariser is GPT-4.1; ours is any ``TextGenerator``: the
  policy's base by default, or an OpenAI-compatible server
  (``advrag.common.endpoint.OpenAIChatGenerator``);
- the paper does not say what happens when the summariser fails; we show the
  raw documents and count it (``raw_fallbacks``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from advrag.common.endpoint import OpenAIChatGenerator
from advrag.common.types import Passage, Summary, TextGenerator, format_docs

if TYPE_CHECKING:
    from advrag.config.flows import SummaryConfig

SUMMARY_FALLBACK_MESSAGE = (
    "This query requires design, computation, or complex reasoning, which exceeds the "
    "capabilities of a search engine. Please input another query or proceed with direct "
    "reasoning."
)
"""UR² App. D.3: what the summariser answers for a query that asks for reasoning, not facts."""

PROMPT_VERSION = "ur2-d3-v1"
"""Part of every cache key: bump it when ``SUMMARY_TEMPLATE`` changes."""

SUMMARY_TEMPLATE = """You help a reasoning agent that queries a search engine. First decide what kind of query it wrote.

Step 1: Classify the query.
- A knowledge query asks for facts: who, what, when, where, a definition, a date, a place, a piece of history. Go to Step 2.
- A reasoning query asks for design, computation, or complex reasoning (solving, comparing, deriving, calculating). Output exactly this sentence and nothing else:
{fallback}

Step 2: Summarise the documents for a knowledge query.
- Read the documents below and extract only the facts relevant to the query.
- Be accurate and concise; do not add facts that are not in the documents.
- Start your answer with the label **Final Information** on its own line, then write the facts.

Query: {query}

Documents:
{documents}
"""

FALLBACK_FRAGMENTS = (
    "requires design, computation, or complex reasoning",
    "exceeds the capabilities of a search engine",
    "input another query or proceed with direct reasoning",
)
LABEL = re.compile(r"^[ \t#>*-]*final\s+information(?::\*\*|\*\*:?|:)?",
                   re.IGNORECASE | re.MULTILINE)
"""The label at the start of a line (markdown bold, heading or a colon around it allowed)."""
CACHE_FILE = "summaries.sqlite"

@dataclass
class SummaryStats:
    """Counts over a summariser's life: ``summaries + fallbacks + raw_fallbacks == requests``."""

    requests: int = 0
    """(query, passages) pairs answered."""
    cache_hits: int = 0
    """Requests answered from the on-disk cache, without generating."""
    generated: int = 0
    """Prompts sent to the generator (identical requests of one batch count once)."""
    summaries: int = 0
    """Requests answered with a summary."""
    fallbacks: int = 0
    """Requests answered with the fallback message (UR²'s fallback faults)."""
    raw_fallbacks: int = 0
    """Requests answered with the raw documents: empty, timed-out or malformed output."""

    def as_dict(self) -> dict[str, int]:
        """The counts by name (for logging)."""
        return asdict(self)


def summary_prompt(query: str, passages: Sequence[Passage]) -> str:
    """The summariser's user message: instructions, the query, then the documents."""
    return SUMMARY_TEMPLATE.format(
        fallback=SUMMARY_FALLBACK_MESSAGE, query=query, documents=format_docs(passages)
    )


def _words(text: str) -> str:
    """Lower-case words separated by single spaces (markdown, punctuation and case dropped)."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def is_fallback(text: str) -> bool:
    """Whether ``text`` carries the fallback message: the whole sentence or a clear fragment."""
    words = f" {_words(text)} "
    return any(f" {_words(fragment)} " in words for fragment in FALLBACK_FRAGMENTS)


def parse_summary(output: str) -> Summary | None:
    """Read one summariser output; None when it is malformed (the caller shows raw documents).

    The body is the text after the first "Final Information" label that starts
    a line (the whole output when there is none). A body carrying the fallback
    message is a fallback; a label with a non-empty body is a summary; failing
    both, an output that carries the fallback message anywhere (before the
    label) is a fallback, and anything else is malformed.
    """
    label = LABEL.search(output)
    body = output[label.end():] if label else output
    if is_fallback(body):
        return Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")
    body = body.strip()
    if label is not None and body:
        return Summary(body, "summary")
    return Summary(SUMMARY_FALLBACK_MESSAGE, "fallback") if is_fallback(output) else None


class SummaryCache:
    """(key → Summary) in one sqlite file; the directory is made on the first write."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / CACHE_FILE

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=30)
        connection.execute(
            "CREATE TABLE IF NOT EXISTS summaries (key TEXT PRIMARY KEY, kind TEXT, text TEXT)"
        )
        return connection

    def get_many(self, keys: Sequence[str]) -> dict[str, Summary]:
        """The cached summaries among ``keys``."""
        if not self.path.is_file():
            return {}
        with closing(self._connect()) as connection:
            rows = [
                connection.execute("SELECT kind, text FROM summaries WHERE key = ?", (key,))
                .fetchone()
                for key in keys
            ]
        return {key: Summary(row[1], row[0]) for key, row in zip(keys, rows) if row}

    def put_many(self, entries: dict[str, Summary]) -> None:
        """Store ``entries`` in one transaction."""
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as connection, connection:
            connection.executemany(
                "INSERT OR REPLACE INTO summaries (key, kind, text) VALUES (?, ?, ?)",
                [(key, s.kind, s.text) for key, s in entries.items()],
            )


class LLMSummariser:
    """Batched, cached (query, passages) → ``Summary`` through one ``TextGenerator``.

    An ``advrag.common.types.Summariser``, which is all the agents know of it.

    ``name`` identifies the model in cache keys (a model spec, or endpoint and
    model); ``cache_dir`` None keeps nothing on disk. Not thread-safe: callers
    that share one (the retrieval server) serialise calls.
    """

    def __init__(self, generator: TextGenerator, name: str, *, max_new_tokens: int = 256,
                 cache_dir: str | Path | None = None) -> None:
        self.generator = generator
        self.name = name
        self.max_new_tokens = max_new_tokens
        self.cache = SummaryCache(cache_dir) if cache_dir is not None else None
        self.stats = SummaryStats()

    def key(self, query: str, passages: Sequence[Passage]) -> str:
        """Cache key of one request (a passage without an id is keyed by its contents)."""
        ids = [p.id or p.contents for p in passages]
        fields = [self.name, PROMPT_VERSION, self.max_new_tokens, query, ids]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    def summarise(self, requests: Sequence[tuple[str, Sequence[Passage]]]) -> list[Summary]:
        """One ``Summary`` per (query, passages), in order; cache misses share one generate call."""
        keys = [self.key(query, passages) for query, passages in requests]
        cached = self.cache.get_many(keys) if self.cache else {}
        todo = {key: request for key, request in zip(keys, requests) if key not in cached}
        fresh = self._generate(list(todo.values()))
        new = {key: s for key, s in zip(todo, fresh) if s is not None}
        if self.cache:
            self.cache.put_many(new)
        results = [
            cached.get(key) or new.get(key) or Summary(format_docs(passages), "raw")
            for key, (_, passages) in zip(keys, requests)
        ]
        self._count(results, hits=sum(key in cached for key in keys), generated=len(todo))
        return results

    def _generate(self, requests: list[tuple[str, Sequence[Passage]]]) -> list[Summary | None]:
        """Parsed outputs of one ``generate`` call over ``requests`` (None = malformed)."""
        if not requests:
            return []
        prompts = [self.generator.chat_prompt(summary_prompt(q, ps)) for q, ps in requests]
        outputs = self.generator.generate(prompts, max_new_tokens=self.max_new_tokens)
        return [parse_summary(output) for output in outputs]

    def _count(self, results: list[Summary], *, hits: int, generated: int) -> None:
        """Add one batch's outcomes to ``stats``."""
        stats = self.stats
        stats.requests += len(results)
        stats.cache_hits += hits
        stats.generated += generated
        stats.summaries += sum(s.kind == "summary" for s in results)
        stats.fallbacks += sum(s.kind == "fallback" for s in results)
        stats.raw_fallbacks += sum(s.kind == "raw" for s in results)


ModelLoader = Callable[[str], TextGenerator]
"""A model spec → greedy generation from that model: how the caller hands the summariser a
local model (this module imports neither ``models`` nor ``engines``). The UR² recipe's
``load_summary_model`` is the one the project passes."""


def _load_local(load_model: ModelLoader | None, spec: str) -> TextGenerator:
    """The local model ``spec`` through the caller's ``load_model``."""
    if load_model is None:
        raise ValueError(f"make_summariser: summarising with the local model {spec!r} needs "
                         "load_model (a model spec → TextGenerator), or set an endpoint.")
    return load_model(spec)


def make_summariser(config: SummaryConfig, local_generator: TextGenerator | None = None,
                    local_name: str | None = None, *,
                    load_model: ModelLoader | None = None) -> LLMSummariser | None:
    """The summariser ``config`` describes, or None when ``summarise`` is false.

    Which model: ``endpoint`` → that server; else ``model`` → that spec, loaded
    by ``load_model``; else ``local_generator`` (the policy's base, which must stay
    frozen: its summaries are cached under ``local_name``, its model spec); else
    smollm2, loaded by ``load_model``.
    """
    if not config.summarise:
        return None
    if config.endpoint is not None:
        generator = OpenAIChatGenerator(config.endpoint, config.model, timeout_s=config.timeout_s)
        name = f"{generator.base}#{generator.model}"
    elif config.model is not None or local_generator is None:
        name = config.model or "smollm2"
        generator = _load_local(load_model, name)
    elif local_name is None:
        raise ValueError("make_summariser: pass local_name (the local generator's model spec); "
                         "it keys the cached summaries.")
    else:
        generator, name = local_generator, local_name
    return LLMSummariser(generator, name, max_new_tokens=config.max_new_tokens,
                         cache_dir=config.cache_dir)
