"""One thread searches for many callers: concurrent requests' queries become batches.

A retrieval server answering rollout workers one request at a time encodes one query,
searches one vector, and makes every other worker wait; the encoder and FAISS are far
cheaper per query in batches. ``BatchingSearcher`` puts each request on a queue; its
worker thread, the only thread that touches the retriever (the Hugging Face tokenizer
inside the embedder is not safe to share across threads), takes every request waiting,
up to ``max_batch_queries`` queries, and answers them with one ``search`` per distinct
``topk`` (so each answer is exactly what that request alone would have got), then one
``summarise`` call when there is a summariser. A request cancelled before its batch
starts (its caller timed out) is dropped unsearched.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from advrag.common.types import Passage, Retriever

if TYPE_CHECKING:
    from advrag.common.types import Summary
    from advrag.retrieval.summary import LLMSummariser

Answer = tuple[list[list[Passage]], list["Summary"] | None]
"""One request's hits per query, and their summaries when the server summarises."""


@dataclass
class _Request:
    queries: list[str]
    topk: int
    future: Future = field(default_factory=Future)


class BatchingSearcher:
    """Answers ``submit``ted requests in batches on one worker thread (module docstring).

    ``on_batch(queries)`` is called with each batch's query count (for metrics).
    """

    def __init__(self, retriever: Retriever, *, max_batch_queries: int = 512,
                 summariser: LLMSummariser | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:
        if max_batch_queries < 1:
            raise ValueError(f"max_batch_queries must be >= 1, got {max_batch_queries}")
        self.retriever, self.summariser = retriever, summariser
        self.max_batch_queries = max_batch_queries
        self.on_batch = on_batch
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._held: _Request | None = None  # taken, but over the last batch's cap
        self._queued_queries = 0
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="retrieval-batcher", daemon=True)
        self._thread.start()

    @property
    def queued_queries(self) -> int:
        """Queries submitted and not yet searched."""
        return self._queued_queries

    def submit(self, queries: Sequence[str], topk: int) -> Future:
        """Queue one request; its future resolves to its ``Answer`` (or the search's error)."""
        request = _Request(list(queries), topk)
        self._add_queued(len(request.queries))
        self._queue.put(request)
        return request.future

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker once the requests queued before this call are answered."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _add_queued(self, n: int) -> None:
        with self._count_lock:
            self._queued_queries += n

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [r for r in batch if r.future.set_running_or_notify_cancel()]
            self._add_queued(-sum(len(r.queries) for r in batch))
            if live:
                self._answer(live)

    def _next_batch(self) -> list[_Request] | None:
        """Every request waiting, up to the cap (a first request over it goes alone); None to stop."""
        first = self._held or self._queue.get()
        self._held = None
        if first is None:
            return None
        batch, size = [first], len(first.queries)
        while size < self.max_batch_queries:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                break
            if request is None:  # stop, after this batch
                self._queue.put(None)
                break
            if size + len(request.queries) > self.max_batch_queries:
                self._held = request  # the next batch's first
                break
            batch.append(request)
            size += len(request.queries)
        return batch

    def _answer(self, batch: list[_Request]) -> None:
        """One search per distinct topk, one summarise call; each request gets its slice."""
        try:
            found_by_topk = {}
            for topk in dict.fromkeys(r.topk for r in batch):
                queries = [q for r in batch if r.topk == topk for q in r.queries]
                found_by_topk[topk] = iter(self.retriever.search(queries, topk))
            answers = [[next(found_by_topk[r.topk]) for _ in r.queries] for r in batch]
            summaries = self._summaries(batch, answers)
        except Exception as error:  # noqa: BLE001 (every caller gets the search's error)
            for request in batch:
                request.future.set_exception(error)
            return
        if self.on_batch is not None:
            self.on_batch(sum(len(r.queries) for r in batch))
        for request, found, summary in zip(batch, answers, summaries, strict=True):
            request.future.set_result((found, summary))

    def _summaries(self, batch: list[_Request],
                   answers: list[list[list[Passage]]]) -> list[list[Summary] | None]:
        """Each request's summaries (one ``summarise`` call for the batch), or None each."""
        if self.summariser is None:
            return [None] * len(batch)
        pairs = [(q, found) for r, hits in zip(batch, answers) for q, found in zip(r.queries, hits)]
        flat = iter(self.summariser.summarise(pairs))
        return [[next(flat) for _ in r.queries] for r in batch]
