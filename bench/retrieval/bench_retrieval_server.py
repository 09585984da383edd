"""Many rollout workers on one retrieval server: queries per second and latency, with batching on
and off, side by side in one run.

    python bench/retrieval/bench_retrieval_server.py [--seconds 20] [--clients 64]

For each server setting (``--max-batch-queries 512``, the default, and ``1``: one request's
queries at a time, as before batching) the server runs as its own process on the world's dense
index (`advrag serve-retriever`'s module, real uvicorn), and this process drives it over HTTP:

1. **one client**: single-query requests back to back for ``--seconds``;
2. **many clients**: ``--clients`` concurrent clients, each sending single-query requests back
   to back for ``--seconds``; halfway, one more client sends one 5,000-query request, which the
   server must refuse (413) at once without stalling the others.

Queries are the world's dev and test questions, in turn. First, the retriever itself is timed
in this process at batch sizes 1 to 64 (no HTTP): the ceiling the server's batches can reach on
this machine, whose two cores the server, its worker and these clients share. Writes ``--out``
(bench/results/retrieval_server.json): per setting and phase, queries per second, p50 and p99
latency, errors, the big request's status and seconds, and the server's mean batch size (from
its ``/metrics``); and the in-process ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

BIG_REQUEST = 5000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index_dir: Path, max_batch_queries: int) -> tuple[subprocess.Popen, str]:
    """The retrieval server in its own process; returns it and its URL once /health answers."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "advrag.retrieval.server", "--index-dir", str(index_dir),
               "--port", str(port), "--max-batch-queries", str(max_batch_queries)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return server, url
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the retrieval server did not answer /health within 120 s: {command}")


async def client(http, url: str, queries: list[str], offset: int, until: float,
                 latencies: list[float], errors: list[str]) -> None:
    """Single-query requests back to back until ``until``."""
    i = offset
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            async with http.post(f"{url}/retrieve", json={
                    "queries": [queries[i % len(queries)]], "topk": 3}) as response:
                await response.read()
                if response.status != 200:
                    errors.append(f"HTTP {response.status}")
        except Exception as error:  # noqa: BLE001 (counted, reported)
            errors.append(type(error).__name__)
        latencies.append(time.perf_counter() - started)
        i += 1


async def big_request(http, url: str, queries: list[str], at: float) -> dict:
    """One ``BIG_REQUEST``-query request at ``at``: its status and seconds."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    started = time.perf_counter()
    body = {"queries": [queries[i % len(queries)] for i in range(BIG_REQUEST)]}
    async with http.post(f"{url}/retrieve", json=body) as response:
        await response.read()
        return {"status": response.status, "seconds": time.perf_counter() - started}


async def phase(url: str, queries: list[str], clients: int, seconds: float,
                with_big_request: bool) -> dict:
    """``clients`` concurrent clients for ``seconds`` (and the big request halfway); aiohttp,
    whose client costs less CPU than httpx's on the two cores the server shares."""
    import aiohttp

    latencies: list[float] = []
    errors: list[str] = []
    connector = aiohttp.TCPConnector(limit=clients + 1)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as http:
        started = time.perf_counter()
        until = started + seconds
        tasks = [client(http, url, queries, 97 * c, until, latencies, errors)
                 for c in range(clients)]
        big = (big_request(http, url, queries, started + seconds / 2) if with_big_request
               else asyncio.sleep(0, result=None))
        *_, big_result = await asyncio.gather(*tasks, big)
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"clients": clients, "requests": len(latencies), "qps": len(latencies) / elapsed,
            "p50_s": statistics.median(ordered), "p99_s": ordered[int(0.99 * (len(ordered) - 1))],
            "errors": len(errors), "error_kinds": sorted(set(errors)), "big_request": big_result}


def batch_mean(url: str) -> float:
    """Mean queries per search batch since the server started (its /metrics)."""
    import httpx

    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in httpx.get(f"{url}/metrics").text.splitlines()
               if line and not line.startswith("#")}
    count = samples["advrag_retrieval_batch_queries_count"]
    return samples["advrag_retrieval_batch_queries_sum"] / count if count else 0.0


def encoder_ceiling(index_dir: Path, queries: list[str], repeats: int = 20) -> dict[str, float]:
    """Queries per second of the retriever itself, in this process with no HTTP, by batch size:
    what the server's batches can at most reach on this machine."""
    from advrag.retrieval.retriever import load_retriever

    retriever, out = load_retriever(index_dir), {}
    for size in (1, 4, 16, 64):
        retriever.search(queries[:size], 3)  # warm
        started = time.perf_counter()
        for i in range(repeats):
            retriever.search([queries[(i * size + j) % len(queries)] for j in range(size)], 3)
        out[str(size)] = size * repeats / (time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench/results/retrieval_server.json"))
    args = parser.parse_args()

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the server's default too
    world = offline_world()
    queries = [json.loads(line)["question"] for split in ("dev", "test")
               for line in (world / f"{split}.jsonl").read_text().splitlines()]
    ceiling = encoder_ceiling(Path("processed/index"), queries)
    print(f"in-process search, queries/s by batch size: {ceiling}", flush=True)
    settings = {}
    for max_batch in (512, 1):
        server, url = start_server(Path("processed/index"), max_batch)
        try:
            asyncio.run(phase(url, queries, 4, 3, False))  # warm the encoder and connections
            one = asyncio.run(phase(url, queries, 1, args.seconds, False))
            many = asyncio.run(phase(url, queries, args.clients, args.seconds, True))
            settings[f"max_batch_queries={max_batch}"] = {
                "one_client": one, "many_clients": many, "speedup": many["qps"] / one["qps"],
                "mean_batch_queries": batch_mean(url)}
            print(f"max_batch_queries {max_batch}: {settings[f'max_batch_queries={max_batch}']}",
                  flush=True)
        finally:
            server.terminate()
            server.wait(30)
    write_report(args.out, {"settings": settings, "in_process_qps_by_batch": ceiling,
                            "seconds": args.seconds,
                            "clients": args.clients, "big_request_queries": BIG_REQUEST,
                            "index": "processed/index (the demo world, flat, MiniLM)",
                            "queries": len(queries)})


if __name__ == "__main__":
    main()
