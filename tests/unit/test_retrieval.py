"""Retrieval: chunking, embedders, FAISS/BM25 indexes, retrievers (real MiniLM, small corpora)."""

from __future__ import annotations

import copy
import itertools
import json
import math
import os

import numpy as np
import pytest

from advrag.common.fileio import atomic_dir
from advrag.common.types import Passage
from advrag.retrieval.bm25 import BM25Index, build_bm25_dir, tokenize
from advrag.retrieval.chunking import chunk_corpus_file, chunk_passage, window_starts
from advrag.retrieval.embedding import (
    BGE_QUERY_INSTRUCTION,
    Embedder,
    embed_corpus_file,
    infer_family,
)
from advrag.retrieval.index import (
    brute_force_search,
    build_index,
    build_index_dir,
    load_index,
    save_index,
)
from advrag.retrieval.retriever import DenseRetriever, load_retriever

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Idle OpenMP threads sleep instead of spinning: on 2 shared cores a spinning pool made each
# MiniLM call 40x slower. Only effective if torch/faiss are not imported yet (conftest is better).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# ---------------------------------------------------------------- generated corpus
FIRST = [
    "Alvero",
    "Brisca",
    "Corvane",
    "Dellith",
    "Esmor",
    "Faltrin",
    "Gorvena",
    "Hastrel",
    "Ilvane",
    "Jorrith",
]
LAST = ["Quenby", "Rastow", "Sellick", "Tovrin", "Umbrell"]
TOWNS = ["Marrowdale", "Pellingford", "Quistmoor", "Ravensholt", "Saltmere", "Thornwick", "Umberlee",
         "Vantry", "Wexcombe", "Yarrowby", "Zennor Gap"]  # fmt: skip
JOBS = ["glassblower", "cartographer", "beekeeper", "clockmaker", "ferry pilot", "violin maker",
        "lighthouse keeper"]  # fmt: skip
THINGS = ["a copper orrery", "a floating library", "a wind-powered loom", "a salt-crystal bridge",
          "an ice observatory", "a brass submarine", "a clay organ", "a moss-covered tower",
          "a silver kite"]  # fmt: skip


def make_corpus(n: int = 50) -> list[dict]:
    """n invented biographies: title line = the person's name, then three sentences."""
    docs = []
    for i, (first, last) in enumerate(itertools.islice(itertools.product(FIRST, LAST), n)):
        sentences = [
            f"{first} {last} was born in {TOWNS[i % 11]} in {1700 + 7 * i}.",
            f"As a {JOBS[i % 7]}, {first} designed {THINGS[i % 9]} that still stands near the river.",
            f"{first}'s favourite number was {13 * i + 5} and the family dog was called {last[:3]}{i}.",
        ]
        docs.append({"id": f"doc{i}", "contents": f"{first} {last}\n" + " ".join(sentences),
                     "sentences": sentences})  # fmt: skip
    return docs


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def write_jsonl(path, rows) -> None:
    path.write_text(
        "".join(json.dumps({"id": r["id"], "contents": r["contents"]}) + "\n" for r in rows)
    )


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return make_corpus()


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return Embedder("minilm", progress=False)


@pytest.fixture(scope="module")
def corpus_embeddings(minilm, corpus) -> np.ndarray:
    return minilm.encode_passages([d["contents"] for d in corpus])


# ---------------------------------------------------------------- chunking
def test_window_starts_hand_cases():
    # step = max_words - overlap = 3; a window [s, s+4) must reach the last word.
    assert window_starts(4, 4, 1) == [0]  # fits in one window
    assert window_starts(7, 4, 1) == [0, 3]  # [0,4) [3,7)
    assert window_starts(8, 4, 1) == [0, 3, 6]  # [0,4) [3,7) [6,8)
    assert window_starts(10, 5, 0) == [0, 5]


def test_chunk_passage_splits_with_overlap_and_keeps_title():
    passage = {"id": "7", "contents": "Title Words\na b c d e f g h"}
    chunks = chunk_passage(passage, max_words=4, overlap=1)
    assert chunks == [
        {"id": "7#0", "contents": "Title Words\na b c d"},
        {"id": "7#1", "contents": "Title Words\nd e f g"},
        {"id": "7#2", "contents": "Title Words\ng h"},
    ]


def test_short_passage_stays_whole_with_original_id():
    passage = {"id": "x", "contents": "T\none  two\nthree"}  # 3 words, odd whitespace kept
    assert chunk_passage(passage, max_words=3, overlap=1) == [passage]


def test_passage_without_title_line_chunks_text_only():
    chunks = chunk_passage({"id": "n", "contents": "a b c"}, max_words=2, overlap=0)
    assert [c["contents"] for c in chunks] == ["a b", "c"]


@pytest.mark.parametrize("max_words, overlap", [(0, 0), (4, 4), (4, -1)])
def test_bad_window_is_rejected(max_words, overlap):
    with pytest.raises(ValueError, match="max_words|overlap"):
        chunk_passage({"id": "1", "contents": "t\na"}, max_words, overlap)


def test_chunk_corpus_file_writes_all_chunks_atomically(tmp_path):
    src, out = tmp_path / "corpus.jsonl", tmp_path / "out" / "chunks.jsonl"
    write_jsonl(src, [{"id": 1, "contents": "A\n" + " ".join("w" * i for i in range(1, 11))},
                      {"id": "b", "contents": "B\nshort text"}])  # fmt: skip
    assert chunk_corpus_file(src, out, max_words=4, overlap=2, progress=False) == 4 + 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # 10 words, step 2: windows at 0,2,4,6 (6+4 = 10 reaches the end)
    assert [r["id"] for r in rows] == ["1#0", "1#1", "1#2", "1#3", "b"]
    assert rows[3]["contents"] == "A\nwwwwwww wwwwwwww wwwwwwwww wwwwwwwwww"
    assert sorted(p.name for p in out.parent.iterdir()) == ["chunks.jsonl"]  # no temp left


def test_corpus_errors_name_the_line_and_the_missing_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "contents": "t\\nx"}\n{"title": "no contents"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*'id' and 'contents'"):
        chunk_corpus_file(bad, tmp_path / "o.jsonl", 4, 1, progress=False)
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(FileNotFoundError, match="dvc repro"):
        chunk_corpus_file(tmp_path / "missing.jsonl", tmp_path / "o.jsonl", 4, 1)


# ---------------------------------------------------------------- embedding
@pytest.mark.parametrize(
    "spec, family, expected",
    [
        ("minilm", None, "plain"),
        ("intfloat/e5-base-v2", None, "e5"),
        ("/models/multilingual-e5-large", None, "e5"),
        ("BAAI/bge-small-en-v1.5", None, "bge"),
        ("/models/my-encoder", "bge", "bge"),
        ("intfloat/e5-base-v2", "plain", "plain"),
        ("some/e50-model", None, "plain"),  # "e50" is not the e5 token
    ],
)
def test_family_inference(spec, family, expected):
    assert infer_family(spec, family) == expected


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="choose one of"):
        infer_family("minilm", "colbert")


@pytest.mark.slow
def test_unloadable_model_says_what_to_pass():
    with pytest.raises(RuntimeError, match="Pass 'minilm'"):
        Embedder("no-such-org/no-such-model", device="cpu")


@pytest.mark.slow
def test_minilm_outputs_unit_float32(minilm, corpus_embeddings):
    assert corpus_embeddings.shape == (50, 384) and corpus_embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(corpus_embeddings, axis=1), 1.0, atol=1e-5)
    assert minilm.encode_queries([]).shape == (0, 384)
    with pytest.raises(TypeError, match="list of strings"):
        minilm.encode_queries("one string")


@pytest.mark.slow
def test_e5_and_bge_prefixes_reach_the_model(minilm):
    # Same loaded model, other family (the constructor's family= path is test_family_inference).
    e5, bge = copy.copy(minilm), copy.copy(minilm)
    e5.family, bge.family = "e5", "bge"
    text = "who built the salt-crystal bridge"
    plain = minilm.encode_queries
    np.testing.assert_allclose(e5.encode_queries([text]), plain(["query: " + text]), atol=1e-6)
    np.testing.assert_allclose(e5.encode_passages([text]), plain(["passage: " + text]), atol=1e-6)
    np.testing.assert_allclose(
        bge.encode_queries([text]), plain([BGE_QUERY_INSTRUCTION + text]), atol=1e-6
    )
    np.testing.assert_allclose(bge.encode_passages([text]), plain([text]), atol=1e-6)
    assert not np.allclose(e5.encode_queries([text]), plain([text]), atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("sentence", [0, 1])
def test_own_sentence_retrieves_its_passage_first(minilm, corpus, corpus_embeddings, sentence):
    passages = [Passage(d["id"], d["contents"]) for d in corpus]
    retriever = DenseRetriever(minilm, build_index(corpus_embeddings, progress=False), passages)
    results = retriever.search([d["sentences"][sentence] for d in corpus], k=3)
    assert [hits[0].id for hits in results] == [d["id"] for d in corpus]
    assert all(len(hits) == 3 and hits[0].score > hits[1].score for hits in results)
    assert all(isinstance(hits[0].score, float) for hits in results)


@pytest.mark.slow
def test_dense_retriever_checks_sizes_and_clips_k(minilm, corpus, corpus_embeddings):
    passages = [Passage(d["id"], d["contents"]) for d in corpus]
    small = build_index(unit_vectors(np.random.default_rng(7), 50, 8), progress=False)
    with pytest.raises(ValueError, match="384-d vectors but the index holds 8-d"):
        DenseRetriever(minilm, small, passages)
    with pytest.raises(ValueError, match="50 vectors but 49 passages"):
        DenseRetriever(minilm, build_index(corpus_embeddings, progress=False), passages[:49])
    retriever = DenseRetriever(minilm, build_index(corpus_embeddings, progress=False), passages)
    scores = [p.score for p in retriever.search(["a clockmaker"], k=500)[0]]
    assert len(scores) == 50 and scores == sorted(scores, reverse=True)


# ---------------------------------------------------------------- dense indexes
def test_brute_force_hand_case_orders_and_breaks_ties_by_id():
    emb = np.array([[1, 0], [0, 1], [0.6, 0.8], [0, 1]], dtype=np.float32)
    scores, ids = brute_force_search(emb, np.array([[0, 1]], dtype=np.float32), k=3)
    # scores: 0, 1, 0.8, 1 -> ids 1 and 3 tie at 1 (lower id first), then 2
    assert ids.tolist() == [[1, 3, 2]]
    np.testing.assert_allclose(scores, [[1, 1, 0.8]], atol=1e-6)


def test_flat_agrees_exactly_with_brute_force():
    rng = np.random.default_rng(0)
    emb, queries = unit_vectors(rng, 2000, 32), unit_vectors(rng, 64, 32)
    ref_scores, ref_ids = brute_force_search(emb, queries, 10)
    scores, ids = build_index(emb, "flat", progress=False).search(queries, 10)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)


def recall_at_10(ids: np.ndarray, ref_ids: np.ndarray) -> float:
    return float(
        np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), ref_ids.tolist())])
    )


def test_hnsw_recall_against_brute_force():
    rng = np.random.default_rng(1)
    emb, queries = unit_vectors(rng, 3000, 32), unit_vectors(rng, 100, 32)
    _, ref_ids = brute_force_search(emb, queries, 10)
    _, ids = build_index(emb, "hnsw", progress=False).search(queries, 10)
    assert recall_at_10(ids, ref_ids) >= 0.95


def test_search_params_change_without_rebuild():
    rng = np.random.default_rng(8)
    emb, queries = unit_vectors(rng, 3000, 64), unit_vectors(rng, 50, 64)
    _, ref_ids = brute_force_search(emb, queries, 10)
    index = build_index(emb, "hnsw", M=8, ef_search=10, progress=False)
    low = recall_at_10(index.search(queries, 10)[1], ref_ids)
    index.set_search_params(ef_search=200)
    assert index.params["ef_search"] == 200
    assert recall_at_10(index.search(queries, 10)[1], ref_ids) > low
    with pytest.raises(ValueError, match=r"flat indexes accept search params \[\]"):
        build_index(emb, progress=False).set_search_params(nprobe=4)


def test_blas_switch_point_is_made_thread_aware_unless_user_set():
    import faiss

    emb = unit_vectors(np.random.default_rng(9), 10, 4)
    faiss.cvar.distance_compute_blas_threshold = 128_000  # faiss 1.15's default
    build_index(emb, progress=False)
    assert faiss.cvar.distance_compute_blas_threshold == 800 * faiss.omp_get_max_threads()
    faiss.cvar.distance_compute_blas_threshold = 5  # a user's own choice is kept
    build_index(emb, progress=False)
    assert faiss.cvar.distance_compute_blas_threshold == 5
    faiss.cvar.distance_compute_blas_threshold = 800 * faiss.omp_get_max_threads()


def test_ivf_probing_every_cell_is_exact():
    rng = np.random.default_rng(2)
    emb, queries = unit_vectors(rng, 2000, 16), unit_vectors(rng, 32, 16)
    _, ref_ids = brute_force_search(emb, queries, 5)
    index = build_index(emb, "ivf", nlist=20, nprobe=20, progress=False)
    assert index.params == {"nlist": 20, "nprobe": 20}
    np.testing.assert_array_equal(index.search(queries, 5)[1], ref_ids)
    partial = build_index(emb, "ivf", nlist=20, nprobe=2, progress=False)
    assert (
        recall_at_10(partial.search(queries, 10)[1], brute_force_search(emb, queries, 10)[1]) < 1.0
    )


def test_index_rejects_bad_kind_params_and_shapes():
    emb = unit_vectors(np.random.default_rng(3), 100, 8)
    with pytest.raises(ValueError, match="choose one of"):
        build_index(emb, "annoy")
    with pytest.raises(ValueError, match="nprobe"):
        build_index(emb, "flat", nprobe=3)
    with pytest.raises(ValueError, match="nlist must be between 1 and"):
        build_index(emb, "ivf", nlist=500)
    with pytest.raises(ValueError, match="dim 4, the index has dim 8"):
        build_index(emb, progress=False).search(np.ones((1, 4)), 3)


@pytest.mark.parametrize(
    "kind, params", [("flat", {}), ("hnsw", {"ef_search": 40}), ("ivf", {"nprobe": 3})]
)
def test_save_load_round_trip_gives_identical_results(tmp_path, kind, params):
    rng = np.random.default_rng(4)
    emb, queries = unit_vectors(rng, 1500, 24), unit_vectors(rng, 20, 24)
    index = build_index(emb, kind, progress=False, **params)
    save_index(index, tmp_path / "idx")
    loaded = load_index(tmp_path / "idx")
    assert (loaded.kind, loaded.dim, loaded.n, loaded.params) == (kind, 24, 1500, index.params)
    for a, b in zip(index.search(queries, 10), loaded.search(queries, 10)):
        np.testing.assert_array_equal(a, b)


def test_saving_over_an_index_replaces_it_and_a_failed_write_keeps_the_old_one(tmp_path):
    rng = np.random.default_rng(6)
    save_index(build_index(unit_vectors(rng, 10, 4), progress=False), tmp_path / "idx")
    save_index(build_index(unit_vectors(rng, 20, 4), progress=False), tmp_path / "idx")
    assert load_index(tmp_path / "idx").n == 20
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "idx") as tmp:
        (tmp / "partial").write_text("x")
        raise RuntimeError("crash mid-write")
    assert load_index(tmp_path / "idx").n == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temp or old dirs left


def test_load_index_missing_dir_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_index_dir"):
        load_index(tmp_path / "nope")


# ---------------------------------------------------------------- BM25
def test_tokenize_lowercases_and_drops_stopwords():
    assert tokenize("The Copper ORRERY of Vantry, 1742!") == ["copper", "orrery", "vantry", "1742"]
    assert tokenize("The end", stopwords=False) == ["the", "end"]


def test_bm25_score_matches_hand_computation():
    index = BM25Index.build(["apple banana", "cherry"], progress=False)
    scores, ids = index.search(["apple"], k=2)
    # Lucene BM25, N=2, df=1: idf = ln(1 + (2-1+0.5)/(1+0.5)) = ln 2.
    # doc 0: tf=1, dl=2, avgdl=1.5, Lucene drops the constant (k1+1) factor:
    # tf/(tf + k1(1-b+b·dl/avgdl)) = 1/(1 + 1.5·(0.25 + 0.75·2/1.5)) = 1/2.875
    assert ids.tolist() == [[0, 1]]
    assert scores[0, 0] == pytest.approx(math.log(2) / 2.875, rel=1e-5)  # 0.24109
    assert scores[0, 1] == 0.0


def test_bm25_exact_phrase_is_rank_one_and_round_trips(tmp_path, corpus):
    texts = [d["contents"] for d in corpus]
    index = BM25Index.build(texts, progress=False)
    queries = [d["sentences"][2] for d in corpus]  # the favourite-number sentence
    scores, ids = index.search(queries, k=5)
    assert ids[:, 0].tolist() == list(range(len(corpus)))
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25")
    for a, b in zip((scores, ids), loaded.search(queries, k=5)):
        np.testing.assert_array_equal(a, b)


def test_bm25_returns_min_k_n_hits_even_without_overlap():
    index = BM25Index.build(["alpha beta", "gamma"], progress=False)
    scores, ids = index.search(["zzz unknown", ""], k=10)
    assert ids.shape == (2, 2) and not scores.any()


# ---------------------------------------------------------------- index directories + loader
@pytest.mark.slow
def test_dense_and_bm25_directories_load_as_retrievers(tmp_path, minilm, corpus):
    chunks = tmp_path / "chunks.jsonl"
    write_jsonl(chunks, corpus)
    assert embed_corpus_file(
        chunks, tmp_path / "emb.npy", minilm, block_size=16, progress=False
    ) == (50, 384)
    build_index_dir(tmp_path / "emb.npy", chunks, tmp_path / "index", kind="hnsw", progress=False)
    build_bm25_dir(chunks, tmp_path / "bm25", progress=False)
    dense = load_retriever(tmp_path / "index")  # embedder re-created from meta.json ("minilm")
    sparse = load_retriever(tmp_path / "bm25", kind="bm25")
    query = [corpus[17]["sentences"][0]]
    top = dense.search(query, 2)[0][0]
    assert (top.id, top.contents) == ("doc17", corpus[17]["contents"])
    assert sparse.search(query, 2)[0][0].id == "doc17"
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    assert meta["embedder"] == {"spec": "minilm", "family": None} and meta["n"] == 50


def test_build_index_dir_rejects_mismatched_rows(tmp_path, corpus):
    chunks = tmp_path / "chunks.jsonl"
    write_jsonl(chunks, corpus[:3])
    np.save(tmp_path / "emb.npy", unit_vectors(np.random.default_rng(5), 4, 8))
    with pytest.raises(ValueError, match="4 rows but .* 3 passages"):
        build_index_dir(tmp_path / "emb.npy", chunks, tmp_path / "index", progress=False)


def test_load_retriever_errors_are_clear(tmp_path, corpus):
    with pytest.raises(FileNotFoundError, match="dvc repro"):
        load_retriever(tmp_path / "missing")
    chunks = tmp_path / "chunks.jsonl"
    write_jsonl(chunks, corpus[:3])
    build_bm25_dir(chunks, tmp_path / "bm25", progress=False)
    with pytest.raises(ValueError, match="not a dense index"):
        load_retriever(tmp_path / "bm25", kind="dense")
    with pytest.raises(ValueError, match="choose one of"):
        load_retriever(tmp_path / "bm25", kind="colbert")


def test_bm25_index_files_do_not_depend_on_the_hash_seed(tmp_path):
    """The saved BM25 index is byte-identical across interpreters with different hash seeds."""
    import subprocess
    import sys

    script = (
        "import sys; from advrag.retrieval.bm25 import BM25Index; "
        "BM25Index.build(['alpha beta gamma', 'delta beta epsilon', 'zeta eta theta alpha'], "
        "progress=False).save(sys.argv[1])"
    )
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env)
        outputs.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert outputs[0] == outputs[1] and outputs[0]


class ShardCounter:
    """The real embedder, keeping the texts of each shard it embeds; at shard ``stop_at`` it
    raises KeyboardInterrupt instead (what Ctrl-C or a kill does mid-run)."""

    def __init__(self, inner, stop_at: int | None = None):
        self.inner, self.stop_at, self.shards = inner, stop_at, []
        self.spec, self.family, self.dim = inner.spec, inner.family, inner.dim

    def encode_passages(self, texts):
        if len(self.shards) == self.stop_at:
            raise KeyboardInterrupt
        self.shards.append(list(texts))
        return self.inner.encode_passages(texts)


@pytest.mark.slow
def test_an_interrupted_embedding_resumes_after_its_last_whole_shard(tmp_path, minilm, corpus):
    chunks, out = tmp_path / "chunks.jsonl", tmp_path / "emb.npy"
    write_jsonl(chunks, corpus)
    embed_corpus_file(chunks, tmp_path / "straight.npy", minilm, block_size=16, progress=False)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus_file(chunks, out, ShardCounter(minilm, stop_at=2), block_size=16,
                          progress=False)
    record = json.loads((tmp_path / "emb.npy.partial.json").read_text())
    assert not out.exists() and record["rows_done"] == 32  # shards 1 and 2 of 4 (50 passages)

    resumed = ShardCounter(minilm)
    assert embed_corpus_file(chunks, out, resumed, block_size=16, progress=False) == (50, 384)
    assert resumed.shards == [[r["contents"] for r in corpus[32:48]], [corpus[48]["contents"],
                                                                       corpus[49]["contents"]]]
    assert out.read_bytes() == (tmp_path / "straight.npy").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunks.jsonl", "emb.npy",
                                                          "straight.npy"]


@pytest.mark.slow
def test_a_work_file_of_another_job_is_not_resumed(tmp_path, minilm, corpus):
    chunks, out = tmp_path / "chunks.jsonl", tmp_path / "emb.npy"
    write_jsonl(chunks, corpus)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus_file(chunks, out, ShardCounter(minilm, stop_at=1), block_size=16,
                          progress=False)
    write_jsonl(chunks, corpus[::-1])  # the chunks changed since: every shard is embedded anew
    again = ShardCounter(minilm)
    embed_corpus_file(chunks, out, again, block_size=16, progress=False)
    assert len(again.shards) == 4 and again.shards[0][0] == corpus[-1]["contents"]
    again = ShardCounter(minilm)  # a finished file leaves no record: a rerun starts afresh
    embed_corpus_file(chunks, out, again, block_size=25, progress=False)
    assert len(again.shards) == 2


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_without_a_gpu_faiss_the_index_builds_and_searches_on_the_cpu(tmp_path, kind):
    """The GPU path's fallback: faiss-cpu has no GPU, so ``gpu=None`` (the default) builds a
    CPU index that answers as ``gpu=False`` does; ``gpu=True`` is refused naming faiss-gpu."""
    import faiss

    assert faiss.get_num_gpus() == 0  # this machine: faiss-cpu
    vectors = np.random.default_rng(0).normal(size=(400, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    params = {"nlist": 4} if kind == "ivf" else {}
    default = build_index(vectors, kind, progress=False, **params)
    cpu = build_index(vectors, kind, gpu=False, progress=False, **params)
    assert default.gpu_resources is None
    assert [a.tolist() for a in default.search(vectors[:5], 3)] == \
        [a.tolist() for a in cpu.search(vectors[:5], 3)]
    save_index(default, tmp_path / kind)
    loaded = load_index(tmp_path / kind)  # gpu=None again: on the CPU here
    assert loaded.gpu_resources is None
    with pytest.raises(RuntimeError, match="install faiss-gpu"):
        build_index(vectors, kind, gpu=True, progress=False, **params)
    with pytest.raises(RuntimeError, match="install faiss-gpu"):
        load_index(tmp_path / kind, gpu=True)
