"""Dense retrieval speed: FAISS flat and HNSW against numpy brute force, plus MiniLM throughput.

    python bench/retrieval/bench_retrieval.py --sizes 10000 100000 1000000

For each corpus size it draws random unit vectors (dim 384, MiniLM's width),
builds each index once (build time), then times a batch of queries ``--repeats``
times and reports the median queries/s, with recall@k against the exact numpy
answer (HNSW at two efSearch values; uniform random vectors are the hardest
case for graph indexes, real embeddings reach much higher recall). Sets
``OMP_WAIT_POLICY=PASSIVE`` unless already set (see advrag/retrieval/index.py). Embedding a 1M-passage corpus on this CPU (~270 passages/s, about an
hour) is out of scope: MiniLM is timed separately on ``--passages`` real
passages of the offline world corpus, in fp32 and under bf16 autocast.
Prints a markdown table and writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from advrag.common.fileio import atomic_file
from advrag.retrieval._files import iter_corpus
from advrag.retrieval.index import brute_force_search, build_index

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import cpu_description, median_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules

WORLD_CORPUS = "data/world/corpus.jsonl"
HNSW_BUILD = {"M": 32, "ef_construction": 80}
HNSW_EF_SEARCH = (64, 256)


def unit_vectors(rng: np.random.Generator, n: int, dim: int, block: int = 100_000) -> np.ndarray:
    """``(n, dim)`` float32 rows uniform on the unit sphere, drawn in blocks to cap memory."""
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, block):
        rows = rng.standard_normal((min(block, n - start), dim), dtype=np.float32)
        out[start : start + len(rows)] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def recall(ids: np.ndarray, ref_ids: np.ndarray) -> float:
    """Mean fraction of the exact top-k ids found, per query."""
    k = ref_ids.shape[1]
    return float(
        np.mean([len(set(a) & set(b)) / k for a, b in zip(ids.tolist(), ref_ids.tolist())])
    )


def bench_size(
    n: int,
    dim: int,
    n_queries: int,
    k: int,
    repeats: int,
    seed: int,
    kinds: Sequence[str],
    hnsw_max_n: int,
) -> list[dict]:
    """Rows for one corpus size: numpy brute force, then each FAISS kind (HNSW per efSearch)."""
    rng = np.random.default_rng(seed)
    corpus, queries = unit_vectors(rng, n, dim), unit_vectors(rng, n_queries, dim)
    seconds, (_, ref_ids) = median_seconds(lambda: brute_force_search(corpus, queries, k), repeats)
    rows = [_row(n, "numpy brute force", 0.0, n_queries / seconds, 1.0)]
    for kind in kinds:
        if kind == "hnsw" and n > hnsw_max_n:
            print(f"skip hnsw at n={n:,}: building it takes far longer than --hnsw-max-n allows")
            continue
        start = time.perf_counter()
        index = build_index(corpus, kind, progress=False, **(HNSW_BUILD if kind == "hnsw" else {}))
        build_s = time.perf_counter() - start
        for ef in HNSW_EF_SEARCH if kind == "hnsw" else (None,):
            if ef is not None:
                index.set_search_params(ef_search=ef)
            seconds, (_, ids) = median_seconds(lambda i=index: i.search(queries, k), repeats)
            label = f"faiss {kind}" + (f" (M=32, efC=80, efS={ef})" if ef else "")
            rows.append(_row(n, label, build_s, n_queries / seconds, recall(ids, ref_ids)))
        del index  # free the vectors it copied before building the next kind
    return rows


def _row(n: int, method: str, build_s: float, qps: float, recall_at_k: float) -> dict:
    """One result row, rounded for reading."""
    return {"n": n, "method": method, "build_s": round(build_s, 3), "qps": round(qps, 1),
            "recall_at_k": round(recall_at_k, 4)}  # fmt: skip


def bench_minilm(corpus_path: str, n_passages: int, repeats: int) -> list[dict]:
    """MiniLM passages/s on the first ``n_passages`` passages, fp32 and bf16 autocast."""
    from advrag.retrieval.embedding import Embedder

    texts = [row["contents"] for row in islice(iter_corpus(corpus_path), n_passages)]
    words = statistics.mean(len(t.split()) for t in texts)
    rows = []
    for bf16 in (False, True):
        embedder = Embedder("minilm", batch_size=64, device="cpu", bf16=bf16, progress=False)
        embedder.encode_passages(texts[:64])  # warm-up
        seconds, _ = median_seconds(lambda e=embedder: e.encode_passages(texts), repeats)
        rows.append({"model": "all-MiniLM-L6-v2", "precision": "bf16 autocast" if bf16 else "fp32",
                     "passages": len(texts), "mean_words": round(words, 1),
                     "passages_per_s": round(len(texts) / seconds, 1)})  # fmt: skip
    return rows


def markdown(
    index_rows: Sequence[dict], minilm_rows: Sequence[dict], n_queries: int, k: int
) -> str:
    """The two result tables as markdown."""
    lines = [f"| n | method | build s | queries/s (batch {n_queries}, k={k}) | recall@{k} |",
             "|---:|---|---:|---:|---:|"]  # fmt: skip
    lines += [
        f"| {r['n']:,} | {r['method']} | {r['build_s']:.2f} | {r['qps']:,.0f} | {r['recall_at_k']:.3f} |"
        for r in index_rows
    ]
    lines += [
        "",
        "| embedder | precision | passages (mean words) | passages/s |",
        "|---|---|---:|---:|",
    ]
    lines += [
        f"| {r['model']} | {r['precision']} | {r['passages']} ({r['mean_words']}) | {r['passages_per_s']:.0f} |"
        for r in minilm_rows
    ]
    return "\n".join(lines)


def environment() -> dict:
    """Where the numbers were taken."""
    import faiss

    return {"cpu_count": os.cpu_count(), "faiss_threads": faiss.omp_get_max_threads(),
            "faiss": faiss.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "machine": cpu_description(),
            "load_average_1m": os.getloadavg()[0],
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "")}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    """Parse arguments, run both benchmarks, print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument(
        "--kinds", nargs="+", choices=["flat", "hnsw", "ivf"], default=["flat", "hnsw"]
    )
    parser.add_argument(
        "--hnsw-max-n",
        type=int,
        default=100_000,
        help="largest size to build HNSW at (100k takes ~2 min on 2 cores; 1M over 20 min)",
    )
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--corpus", default=WORLD_CORPUS, help="FlashRAG JSONL for MiniLM"
    )
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument("--out", default="bench/results/retrieval.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before faiss/torch load (index.py)
    if args.corpus == WORLD_CORPUS:
        offline_world()
    if not os.path.isfile(args.corpus):
        parser.error(f"--corpus {args.corpus} not found.")
    env = environment()
    index_rows = []
    for n in args.sizes:
        index_rows += bench_size(
            n, args.dim, args.queries, args.k, args.repeats, args.seed, args.kinds, args.hnsw_max_n
        )
        print(f"done n={n:,}", flush=True)
    minilm_rows = bench_minilm(args.corpus, args.passages, repeats=3)
    print(markdown(index_rows, minilm_rows, args.queries, args.k))
    report = {"config": vars(args), "environment": env, "index": index_rows,
              "embedder": minilm_rows}  # fmt: skip
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
