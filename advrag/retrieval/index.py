"""Dense FAISS indexes (flat, HNSW, IVF) over L2-normalised embeddings, scored by inner product.

Kinds and their parameters (defaults in brackets):
- ``flat``: exact inner-product search, no parameters;
- ``hnsw``: ``M`` [32] links per node, ``ef_construction`` [80], ``ef_search`` [64];
- ``ivf``:  ``nlist`` [min(4·√n, n/39), at least 1] k-means cells trained on the
  embeddings themselves, ``nprobe`` [16] cells visited per query.

With a GPU build of faiss (``faiss-gpu-*``) and a visible GPU, flat and IVF
indexes are built and searched on GPU 0 (HNSW has no faiss GPU version and stays
on CPU); saved files are always CPU indexes. An index directory holds
``index.faiss``, ``meta.json`` (format, kind, dim, n, params, embedder) and, when
built by :func:`build_index_dir`, ``passages.jsonl`` with the chunk texts in row order.

Speed on few cores: faiss 1.15 scores a flat batch with its own SIMD loop unless
n_queries·dim ≥ 128 000, a switch point tuned for many-core servers; on 2 cores
that loop is memory-bound (63 queries/s against 100k×384 for a 256-query batch,
vs ~1 000 with BLAS). When the switch point is still that default, building or
loading an index moves it to 800·threads, the thread-aware rule proposed upstream
(faiss PR #5109). On oversubscribed machines export ``OMP_WAIT_POLICY=PASSIVE``:
spinning OpenMP threads starved the BLAS threads there (160 vs 1 000 queries/s).
Otherwise libgomp's default (a short spin, then sleep) searched as fast as PASSIVE
(1 681 vs 1 700 queries/s, 100k×384 flat; docs/performance.md); the trainer runs
with it, the retrieval server with PASSIVE.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from advrag.common.fileio import atomic_dir
from advrag.retrieval._files import PASSAGES_FILE, iter_corpus, link_or_copy

INDEX_FILE = "index.faiss"
META_FILE = "meta.json"
DENSE_FORMAT = "advrag-dense-index/1"
BUILD_HINT = (
    "build it with advrag.retrieval.index.build_index_dir(emb_path, chunks_path, out_dir) "
    "(the DVC `index` stage: `dvc repro`)"
)
_ADD_BLOCK = 65536
_FAISS_115_BLAS_SWITCH = 128_000


@dataclass
class DenseIndex:
    """A FAISS index plus what is needed to search, save and describe it."""

    faiss_index: Any
    kind: str
    params: dict[str, Any]
    dim: int
    gpu_resources: Any = field(default=None, repr=False)

    @property
    def n(self) -> int:
        """Number of indexed vectors."""
        return int(self.faiss_index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` inner-product search: ``(scores, ids)``, both ``(n_queries, min(k, n))``.

        Approximate kinds may return id -1 (score -inf/garbage) when they find fewer than k.
        """
        queries = _as_matrix(queries, "queries")
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries have dim {queries.shape[1]}, the index has dim {self.dim}.")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}.")
        scores, ids = self.faiss_index.search(queries, min(k, self.n))
        return scores, ids

    def set_search_params(self, **params: int) -> None:
        """Change query-time knobs without rebuilding: ``ef_search`` (hnsw), ``nprobe`` (ivf)."""
        allowed = set(_SEARCH_PARAMS.get(self.kind, {}))
        if not set(params) <= allowed:
            raise ValueError(
                f"{self.kind} indexes accept search params {sorted(allowed)}, got {sorted(params)}."
            )
        self.params = {**self.params, **params}
        _apply_query_params(self)


def _as_matrix(array: np.ndarray, name: str) -> np.ndarray:
    """Return ``array`` as a C-contiguous float32 2-D matrix, or say what shape was wrong."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError(
            f"{name} must be a non-empty 2-D array (rows, dim), got shape {matrix.shape}."
        )
    return matrix


def _gpu_resources() -> Any:
    """faiss GPU resources when faiss was built with GPU support and sees a GPU, else None."""
    import faiss

    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        return None
    return faiss.StandardGpuResources()


def _new_flat(dim: int, n: int) -> tuple[Any, dict[str, Any]]:
    """Exact inner-product index."""
    import faiss

    return faiss.IndexFlatIP(dim), {}


def _new_hnsw(
    dim: int, n: int, M: int = 32, ef_construction: int = 80, ef_search: int = 64
) -> tuple[Any, dict[str, Any]]:
    """HNSW graph over inner product."""
    import faiss

    index = faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    return index, {"M": M, "ef_construction": ef_construction, "ef_search": ef_search}


def _new_ivf(
    dim: int, n: int, nlist: int | None = None, nprobe: int = 16
) -> tuple[Any, dict[str, Any]]:
    """Inverted-file index with a flat inner-product coarse quantiser (needs training)."""
    import faiss

    nlist = nlist or max(1, min(round(4 * math.sqrt(n)), n // 39))
    if not 1 <= nlist <= n:
        raise ValueError(f"nlist must be between 1 and the number of vectors ({n}), got {nlist}.")
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    return index, {"nlist": nlist, "nprobe": nprobe}


_BUILDERS: dict[str, Callable[..., tuple[Any, dict[str, Any]]]] = {
    "flat": _new_flat,
    "hnsw": _new_hnsw,
    "ivf": _new_ivf,
}
_SEARCH_PARAMS: dict[str, dict[str, str]] = {
    "hnsw": {"ef_search": "efSearch"},
    "ivf": {"nprobe": "nprobe"},
}


def _tune_blas_switch() -> None:
    """Replace faiss 1.15's many-core BLAS switch point by 800·threads (module docstring)."""
    import faiss

    if faiss.cvar.distance_compute_blas_threshold == _FAISS_115_BLAS_SWITCH:
        faiss.cvar.distance_compute_blas_threshold = 800 * faiss.omp_get_max_threads()


def _apply_query_params(index: DenseIndex) -> None:
    """Set efSearch / nprobe on the live faiss index from ``index.params``."""
    import faiss

    space = faiss.GpuParameterSpace() if index.gpu_resources is not None else faiss.ParameterSpace()
    for name, faiss_name in _SEARCH_PARAMS.get(index.kind, {}).items():
        space.set_index_parameter(index.faiss_index, faiss_name, index.params[name])


def _to_gpu(cpu_index: Any, kind: str, gpu: bool | None) -> tuple[Any, Any]:
    """Move flat/IVF indexes to GPU 0 when allowed and possible; return ``(index, resources)``."""
    if gpu is False or kind == "hnsw":
        return cpu_index, None
    resources = _gpu_resources()
    if resources is None:
        if gpu:
            raise RuntimeError(
                "gpu=True but faiss has no GPU support here; install faiss-gpu or pass gpu=None."
            )
        return cpu_index, None
    import faiss

    return faiss.index_cpu_to_gpu(resources, 0, cpu_index), resources


def build_index(
    embeddings: np.ndarray,
    kind: str = "flat",
    gpu: bool | None = None,
    progress: bool = True,
    **params: Any,
) -> DenseIndex:
    """Build a ``flat``/``hnsw``/``ivf`` inner-product index over ``embeddings`` ``(n, dim)``.

    ``gpu=None`` uses a GPU when faiss can, ``False`` forces CPU. ``params`` are
    the kind's parameters (module docstring); unknown names are rejected.
    """
    if kind not in _BUILDERS:
        raise ValueError(f"Unknown index kind {kind!r}; choose one of {sorted(_BUILDERS)}.")
    matrix = _as_matrix(embeddings, "embeddings")
    n, dim = matrix.shape
    _tune_blas_switch()
    try:
        cpu_index, resolved = _BUILDERS[kind](dim, n, **params)
    except TypeError as exc:
        raise ValueError(f"Bad parameters {sorted(params)} for index kind {kind!r}: {exc}") from exc
    faiss_index, resources = _to_gpu(cpu_index, kind, gpu)
    if not faiss_index.is_trained:
        faiss_index.train(matrix)
    for start in tqdm(
        range(0, n, _ADD_BLOCK), desc=f"index[{kind}]", unit="block", disable=not progress
    ):
        faiss_index.add(matrix[start : start + _ADD_BLOCK])
    index = DenseIndex(faiss_index, kind, resolved, dim, resources)
    _apply_query_params(index)
    return index


def brute_force_search(
    embeddings: np.ndarray, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner-product search in numpy (the reference for the FAISS kinds).

    Returns ``(scores, ids)`` of shape ``(n_queries, min(k, n))``, best first,
    ties broken by the lower id. Works through the queries in blocks so the score
    matrix stays near 256 MB.
    """
    corpus = _as_matrix(embeddings, "embeddings")
    queries = _as_matrix(queries, "queries")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    k = min(k, corpus.shape[0])
    block = max(1, (1 << 26) // corpus.shape[0])
    all_scores, all_ids = [], []
    for start in range(0, queries.shape[0], block):
        scores = queries[start : start + block] @ corpus.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.lexsort((top, -top_scores), axis=1)
        all_ids.append(np.take_along_axis(top, order, axis=1))
        all_scores.append(np.take_along_axis(top_scores, order, axis=1))
    return np.concatenate(all_scores), np.concatenate(all_ids).astype(np.int64)


def _write_index(index: DenseIndex, directory: Path, extra_meta: dict[str, Any] | None) -> None:
    """Write ``index.faiss`` (as a CPU index) and ``meta.json`` into an existing directory."""
    import faiss

    cpu_index = (
        faiss.index_gpu_to_cpu(index.faiss_index) if index.gpu_resources else index.faiss_index
    )
    faiss.write_index(cpu_index, str(directory / INDEX_FILE))
    meta = {
        "format": DENSE_FORMAT,
        "kind": index.kind,
        "dim": index.dim,
        "n": index.n,
        "metric": "inner_product",
        "params": index.params,
        **(extra_meta or {}),
    }
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def save_index(
    index: DenseIndex, out_dir: str | os.PathLike, extra_meta: dict[str, Any] | None = None
) -> None:
    """Write ``index`` to a fresh directory ``out_dir`` (replaced atomically if it exists)."""
    with atomic_dir(out_dir) as tmp:
        _write_index(index, tmp, extra_meta)


def read_meta(index_dir: str | os.PathLike) -> dict[str, Any]:
    """Read ``meta.json`` of an index directory, with an error naming how to build one."""
    path = Path(index_dir) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"No index at {index_dir} ({META_FILE} missing); {BUILD_HINT}.")
    return json.loads(path.read_text(encoding="utf-8"))


def load_index(index_dir: str | os.PathLike, gpu: bool | None = None) -> DenseIndex:
    """Load a directory written by :func:`save_index` / :func:`build_index_dir`."""
    import faiss

    meta = read_meta(index_dir)
    _tune_blas_switch()
    if meta.get("format") != DENSE_FORMAT:
        raise ValueError(
            f"{index_dir} is not a dense index (format {meta.get('format')!r}); {BUILD_HINT}."
        )
    cpu_index = faiss.read_index(str(Path(index_dir) / INDEX_FILE))
    if cpu_index.ntotal != meta["n"] or cpu_index.d != meta["dim"]:
        raise ValueError(
            f"{index_dir}: {INDEX_FILE} does not match {META_FILE}; rebuild it: {BUILD_HINT}."
        )
    faiss_index, resources = _to_gpu(cpu_index, meta["kind"], gpu)
    index = DenseIndex(faiss_index, meta["kind"], meta["params"], meta["dim"], resources)
    _apply_query_params(index)
    return index


def build_index_dir(
    emb_path: str | os.PathLike,
    chunks_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    kind: str = "flat",
    embedder_spec: str = "minilm",
    family: str | None = None,
    progress: bool = True,
    **params: Any,
) -> DenseIndex:
    """DVC stage: index the .npy embeddings of ``chunks_path`` into one self-contained directory.

    The directory gets the index, ``meta.json`` (recording ``embedder_spec`` and
    ``family`` so the retriever re-creates the same query encoder) and the chunk
    texts as ``passages.jsonl`` (row i of the embeddings is line i).
    """
    if not Path(emb_path).is_file():
        raise FileNotFoundError(
            f"Embeddings {emb_path} not found; create them with embed_corpus_file (DVC `embed` stage)."
        )
    embeddings = np.load(emb_path, mmap_mode="r")
    n_chunks = sum(1 for _ in iter_corpus(chunks_path))
    if embeddings.shape[0] != n_chunks:
        raise ValueError(
            f"{emb_path} has {embeddings.shape[0]} rows but {chunks_path} has {n_chunks} passages; "
            "re-run the embed stage on this chunks file."
        )
    index = build_index(embeddings, kind=kind, progress=progress, **params)
    with atomic_dir(out_dir) as tmp:
        _write_index(index, tmp, {"embedder": {"spec": embedder_spec, "family": family}})
        link_or_copy(Path(chunks_path), tmp / PASSAGES_FILE)
    return index
