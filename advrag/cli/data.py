"""`advrag` data-plane commands: the world, its gate, chunks, embeddings, the indexes, the DVC
remote, the retrieval server and the `prepare-data` flow (what `dvc.yaml` calls)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from advrag.cli.base import CONFIG_HELP, app, load
from advrag.retrieval.limits import LIMIT_HELP, ServerLimits


@app.command()
def world(
    out: Path = typer.Option(Path("data/world"), help="Output directory for corpus and QA splits."),
    seed: int = typer.Option(13, help="Generator seed (same seed, same world)."),
    n_train: int = typer.Option(500, help="Number of training questions."),
    n_dev: int = typer.Option(100, help="Number of development questions."),
    n_test: int = typer.Option(100, help="Number of held-out test questions."),
    passage_words: int = typer.Option(60, min=40, max=120,
                                      help="Words per passage (facts, then filler up to it)."),
) -> None:
    """Generate the fictional offline world (corpus + QA splits)."""
    from advrag.common.locks import exclusive
    from advrag.datasets.world import WorldConfig
    from advrag.ops.dataplane import build_world

    with exclusive(out.parent, "the data directory"):  # no run may read it half rebuilt
        build_world(out, WorldConfig(seed=seed, n_train=n_train, n_dev=n_dev, n_test=n_test,
                                     passage_words=passage_words))
    typer.echo(f"wrote the world to {out}")


@app.command()
def gate(
    qa_files: list[Path] = typer.Argument(None, help="QA jsonl/parquet files to validate."),
    corpus: list[Path] = typer.Option([], help="Corpus jsonl file to validate (repeatable)."),
) -> None:
    """Great Expectations gate: exit 1 with a report naming bad rows and rules."""
    from advrag.curation.gates import DataGateError, require_valid

    files = [*(qa_files or []), *corpus]
    try:
        require_valid(qa_files or [], corpus)
    except DataGateError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    typer.echo(f"gate passed: {len(files)} file(s)")


@app.command()
def chunk(
    corpus: Path = typer.Argument(..., help="Corpus jsonl ({id, contents})."),
    out: Path = typer.Argument(..., help="Output chunks jsonl."),
    max_words: int = typer.Option(128, help="Maximum words per chunk."),
    overlap: int = typer.Option(16, help="Words shared by consecutive chunks."),
) -> None:
    """DVC stage: split passages into chunks."""
    from advrag.retrieval.chunking import chunk_corpus_file

    n = chunk_corpus_file(corpus, out, max_words=max_words, overlap=overlap)
    typer.echo(f"{n} chunks → {out}")


@app.command()
def embed(
    chunks: Path = typer.Argument(..., help="Chunks jsonl."),
    out: Path = typer.Argument(..., help="Output .npy of L2-normalised embeddings."),
    model: str = typer.Option("minilm", help="'minilm' (packaged), a local dir or a hub id (E5/BGE ok)."),
    batch_size: int = typer.Option(64, help="Passages per encoder batch."),
    shard_size: int = typer.Option(8192, min=1, help="Passages read, embedded and written at a "
                                   "time: memory holds one shard; an interrupted run resumes "
                                   "after its last whole shard."),
    device: str = typer.Option("cpu", help="cpu: the same bytes on every x86-64 CPU (pinned "
                               "kernels), so dvc.lock too; auto or cuda: faster on a GPU."),
) -> None:
    """DVC stage: embed chunks."""
    from advrag.retrieval.embedding import Embedder, embed_corpus_file, pin_cpu_kernels

    if device == "cpu":
        pin_cpu_kernels()
    embedder = Embedder(model, batch_size=batch_size, device=device)
    workers = (os.cpu_count() or 1) if device == "cpu" else 1  # pinned: one thread a piece
    n, dim = embed_corpus_file(chunks, out, embedder=embedder, block_size=shard_size,
                               workers=workers)
    typer.echo(f"{n}×{dim} embeddings → {out}")


@app.command()
def index(
    embeddings: Path = typer.Argument(..., help="Embeddings .npy."),
    chunks: Path = typer.Argument(..., help="Chunks jsonl (copied next to the index)."),
    out: Path = typer.Argument(..., help="Output index directory."),
    kind: str = typer.Option("flat", help="flat (exact inner product), hnsw or ivf."),
    model: str = typer.Option("minilm", help="Embedder used for the passages (queries must match)."),
) -> None:
    """DVC stage: build the FAISS index directory."""
    from advrag.retrieval.index import build_index_dir

    build_index_dir(embeddings, chunks, out, kind=kind, embedder_spec=model)
    typer.echo(f"{kind} index → {out}")


@app.command()
def bm25(
    chunks: Path = typer.Argument(..., help="Chunks jsonl."),
    out: Path = typer.Argument(..., help="Output BM25 index directory."),
) -> None:
    """DVC stage: build the BM25 index directory."""
    from advrag.retrieval.bm25 import build_bm25_dir

    build_bm25_dir(chunks, out)
    typer.echo(f"bm25 index → {out}")


@app.command()
def remote(
    name: str = typer.Argument(..., help="Remote name, e.g. storage."),
    url: str = typer.Argument(..., help="s3://bucket/prefix"),
    endpoint_url: str | None = typer.Option(None, help="S3-compatible server (MinIO, moto), e.g. http://127.0.0.1:9000."),
    default: bool = typer.Option(True, help="Make it the default remote for dvc push/pull."),
) -> None:
    """Point DVC at an S3 remote (credentials: AWS_* env or `dvc remote modify --local`)."""
    from advrag.ops.dataplane import DvcError, configure_s3_remote

    try:
        configure_s3_remote(name, url, endpoint_url, default=default)
    except (ValueError, DvcError) as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    typer.echo(f"DVC remote {name!r} → {url}; now `dvc push -r {name}` / `dvc pull -r {name}`")


SERVER_LIMITS = ServerLimits()


@app.command("serve-retriever")
def serve_retriever(
    index_dir: Path = typer.Option(Path("processed/index"), help="Index directory to serve."),
    kind: str = typer.Option("dense", help="dense or bm25."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default; beyond it, "
                             "set ADVRAG_RETRIEVER_TOKEN: clients send it as a bearer token)."),
    port: int = typer.Option(8000, help="Port."),
    summarise: bool = typer.Option(False, help="UR²: serve a summary of each query's top-k "
                                   "(or the fallback message) instead of the documents."),
    summary_endpoint: str | None = typer.Option(None, help="OpenAI-compatible summariser server "
                                                "(http://host:port); default: a local model."),
    summary_model: str | None = typer.Option(None, help="Served model name at the endpoint, or "
                                             "a local spec (default: smollm2)."),
    summary_max_new_tokens: int | None = typer.Option(None, help="Token budget of one summary."),
    summary_timeout_s: float | None = typer.Option(None, help="Per-request endpoint limit; "
                                                   "past it, the raw documents are served."),
    summary_cache_dir: Path | None = typer.Option(None, help="Where summaries are cached."),
    max_queries: int = typer.Option(SERVER_LIMITS.max_queries,
                                    help=LIMIT_HELP["max_queries"]),
    max_query_chars: int = typer.Option(SERVER_LIMITS.max_query_chars,
                                        help=LIMIT_HELP["max_query_chars"]),
    timeout_s: float = typer.Option(SERVER_LIMITS.timeout_s, help=LIMIT_HELP["timeout_s"]),
    max_batch_queries: int = typer.Option(SERVER_LIMITS.max_batch_queries,
                                          help=LIMIT_HELP["max_batch_queries"]),
    max_topk: int = typer.Option(SERVER_LIMITS.max_topk, help=LIMIT_HELP["max_topk"]),
    max_body_bytes: int = typer.Option(SERVER_LIMITS.max_body_bytes,
                                       help=LIMIT_HELP["max_body_bytes"]),
    allowed_host: list[str] = typer.Option([], help="A Host name clients use, besides "
                                           "loopback's and --host (repeat the option)."),
    ssl_certfile: str | None = typer.Option(None, help="PEM certificate: serve https."),
    ssl_keyfile: str | None = typer.Option(None, help="The certificate's PEM key."),
) -> None:
    """Search-R1-compatible retrieval server (POST /retrieve, /health, /metrics), batching
    concurrent requests, optionally summarised (UR²)."""
    from pydantic import ValidationError

    from advrag.common.hosts import allowed_hosts
    from advrag.recipes.ur2.recipe import load_summary_model
    from advrag.retrieval.server import (
        ServerLimits,
        require_token_beyond_loopback,
        serve,
        summary_config,
        tls_files,
    )

    try:
        require_token_beyond_loopback(host)
        allowed_hosts(host, allowed_host)
        tls = tls_files(ssl_certfile, ssl_keyfile)
        summary = summary_config(
            summarise, endpoint=summary_endpoint, model=summary_model,
            max_new_tokens=summary_max_new_tokens, timeout_s=summary_timeout_s,
            cache_dir=summary_cache_dir,
        )
        limits = ServerLimits(max_queries, max_query_chars, timeout_s, max_batch_queries,
                              max_topk, max_body_bytes)
    except (ValidationError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    serve(index_dir, host=host, port=port, kind=kind, summary=summary,
          load_model=load_summary_model, limits=limits, hosts=allowed_host, tls=tls)


@app.command("prepare-data")
def prepare_data(config: Path = typer.Option(Path("configs/demo.yaml"), help=CONFIG_HELP)) -> None:
    """Flow: world → GX gate → `dvc add data` → `dvc repro`."""
    cfg = load(config, "demo").data
    from advrag.flows.prepare_data import prepare_data as flow

    flow(cfg)
