"""The retrieval server's batching: concurrent requests searched together, answered as if alone."""

from __future__ import annotations

import json
import threading
from concurrent.futures import CancelledError

import pytest

from advrag.retrieval.batching import BatchingSearcher
from advrag.retrieval.bm25 import BM25Index, build_bm25_dir
from advrag.retrieval.retriever import BM25Retriever, read_passages

WORDS = ["salt", "bridge", "copper", "orrery", "moons", "library", "maps", "loom", "wind",
         "sailcloth", "river", "tower"]
DOCS = [{"id": f"d{i}", "contents": f"Doc {i}\n" + " ".join(WORDS[j % len(WORDS)]
                                                          for j in range(i, i + 3 + i % 4))}
        for i in range(24)]


@pytest.fixture(scope="module")
def bm25(tmp_path_factory) -> BM25Retriever:
    directory = tmp_path_factory.mktemp("bm25")
    chunks = directory / "chunks.jsonl"
    chunks.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build_bm25_dir(chunks, directory / "index", progress=False)
    return BM25Retriever(BM25Index.load(directory / "index"),
                         read_passages(directory / "index" / "passages.jsonl"))


class Gated:
    """A retriever whose first search waits for ``open``, so requests queue up behind it; it
    records every search's queries and k."""

    def __init__(self, inner: BM25Retriever, fail_on: str | None = None):
        self.inner, self.fail_on = inner, fail_on
        self.open, self.calls = threading.Event(), []

    def search(self, queries, k):
        self.open.wait(10)
        self.calls.append((list(queries), k))
        if self.fail_on in queries:
            raise RuntimeError(f"no search for {self.fail_on!r}")
        return self.inner.search(queries, k)


def taken(searcher: BatchingSearcher) -> None:
    """Wait until the worker has taken every queued request (it then blocks at the gate)."""
    while searcher.queued_queries:
        threading.Event().wait(0.01)


def queued(searcher: BatchingSearcher, requests: list[tuple[list[str], int]]):
    """Submit one blocking request, then ``requests`` behind it; open the gate; the futures."""
    first = searcher.submit(["salt bridge"], 2)
    taken(searcher)
    futures = [searcher.submit(q, k) for q, k in requests]
    searcher.retriever.open.set()
    return first, futures


def test_waiting_requests_are_one_search_and_each_gets_its_own_answer(bm25):
    searcher = BatchingSearcher(Gated(bm25), max_batch_queries=64)
    requests = [([f"{WORDS[i]} {WORDS[i + 1]}"], 3) for i in range(10)] + [
        (["copper orrery", "maps library", "wind loom"], 3)]
    first, futures = queued(searcher, requests)
    assert first.result(10) == (bm25.search(["salt bridge"], 2), None)
    for (queries, k), future in zip(requests, futures):
        assert future.result(10) == (bm25.search(queries, k), None)  # as if searched alone
    # the first request went alone; the eleven waiting behind it (13 queries) went as one search
    assert [len(q) for q, _ in searcher.retriever.calls] == [1, 13]
    searcher.close()


def test_each_topk_is_its_own_search_and_the_cap_splits_batches(bm25):
    searcher = BatchingSearcher(Gated(bm25), max_batch_queries=4)
    requests = [(["river tower"], 1), (["copper moons"], 5), (["loom sailcloth"], 1),
                (["salt", "maps", "bridge"], 5), (["orrery"], 2)]
    _, futures = queued(searcher, requests)
    for (queries, k), future in zip(requests, futures):
        found, _ = future.result(10)
        assert found == bm25.search(queries, k) and all(len(h) == k for h in found)
    # batch 1: the first three requests (3 queries; the next would make 6 > 4), one search per
    # topk; batch 2: the three-query request and the last one (4 queries), again by topk
    assert searcher.retriever.calls[1:] == [
        (["river tower", "loom sailcloth"], 1), (["copper moons"], 5),
        (["salt", "maps", "bridge"], 5), (["orrery"], 2)]
    searcher.close()


def test_a_request_over_the_cap_goes_alone(bm25):
    searcher = BatchingSearcher(Gated(bm25), max_batch_queries=2)
    _, (big, small) = queued(searcher, [(["salt", "maps", "loom"], 2), (["river"], 2)])
    assert big.result(10)[0] == bm25.search(["salt", "maps", "loom"], 2)
    assert small.result(10)[0] == bm25.search(["river"], 2)
    assert [q for q, _ in searcher.retriever.calls[1:]] == [["salt", "maps", "loom"], ["river"]]
    searcher.close()


def test_a_cancelled_request_is_dropped_unsearched(bm25):
    searcher = BatchingSearcher(Gated(bm25))
    first = searcher.submit(["salt"], 1)
    taken(searcher)
    gone, kept = searcher.submit(["maps"], 1), searcher.submit(["loom"], 1)
    assert gone.cancel()  # its caller gave up before its batch started
    searcher.retriever.open.set()
    first.result(10), kept.result(10)
    with pytest.raises(CancelledError):
        gone.result(0)
    assert ["maps"] not in [q for q, _ in searcher.retriever.calls]
    assert searcher.queued_queries == 0
    searcher.close()


def test_a_failed_search_fails_its_batch_and_the_worker_goes_on(bm25):
    searcher = BatchingSearcher(Gated(bm25, fail_on="boom"))
    _, (bad, also) = queued(searcher, [(["boom"], 1), (["maps"], 1)])
    for future in (bad, also):  # one search, so both see its error
        with pytest.raises(RuntimeError, match="no search for 'boom'"):
            future.result(10)
    assert searcher.submit(["river"], 1).result(10)[0] == bm25.search(["river"], 1)
    searcher.close()


def test_summaries_come_from_one_call_per_batch(bm25):
    from advrag.common.types import Summary

    class Counting:
        def __init__(self):
            self.calls = []

        def summarise(self, pairs):
            self.calls.append([q for q, _ in pairs])
            return [Summary(f"about {q}", "summary") for q, _ in pairs]

    summariser = Counting()
    searcher = BatchingSearcher(Gated(bm25), summariser=summariser)
    _, futures = queued(searcher, [(["maps", "loom"], 2), (["river"], 1)])
    assert [s.text for s in futures[0].result(10)[1]] == ["about maps", "about loom"]
    assert [s.text for s in futures[1].result(10)[1]] == ["about river"]
    assert summariser.calls[1:] == [["maps", "loom", "river"]]
    searcher.close()
