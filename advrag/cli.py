"""`advrag` command line: every stage runs without Prefect too.

Data-plane commands (chunk, embed, index, bm25) are what `dvc.yaml` calls;
`prepare-data`, `benchmark`, `pipeline` and the rest run the Prefect flows. `demo`
(what `make demo` runs) is the pipeline on configs/pipeline-demo.yaml. Over 800 lines for now:
the split into a package by stage group is issue 59's item 5, not yet done.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from advrag.retrieval.limits import LIMIT_HELP, ServerLimits

app = typer.Typer(help="advrag: retrieval-augmented agents trained with adversarial RL.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)



ENV_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "PREFECT_HOME": str(Path(".prefect").resolve()),
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",  # Prefect's 20 s: too few when busy
    # The temporary server Prefect starts for a command (no `advrag ui` running) serves no UI,
    # so no web page has any business calling it: CORS answers no origin, and state changes
    # need a CSRF token, which Prefect's client fetches (advrag.ops.scheduling.guarded does
    # the same for the servers `advrag ui` and `advrag schedule` start).
    "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS": "",
    "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED": "true",
}


@app.callback()
def _environment() -> None:
    """Telemetry off, state project-local, offline: set before any command imports
    torch, Prefect or MLflow. Values already in the environment win. Flows report to the
    Prefect server `advrag ui` or `advrag schedule` runs from PREFECT_HOME when one answers,
    else to a temporary one Prefect starts; either requires the project's credential
    (PREFECT_HOME/auth-string), which the client then sends. With a PREFECT_API_URL of the
    user's own, their own credential settings are left as they are."""
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if "PREFECT_API_URL" not in os.environ:
        from advrag.ops.scheduling import credential_env, local_api

        home = Path(os.environ["PREFECT_HOME"])
        os.environ.update(credential_env(home))  # the server is ours: its home's credential
        url = local_api(home)
        if url is not None:
            os.environ["PREFECT_API_URL"] = url


PREFECT_START_FAILED = "Timed out while attempting to connect to ephemeral Prefect API"


def prefect_start_fix() -> str:
    """The one line a command prints when Prefect's temporary server did not start in time."""
    limit = os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "?")
    return (f"error: Prefect's temporary server did not answer within {limit} s (a busy "
            "machine?). Rerun with PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=600, or "
            "start a server first with `advrag ui` (in another terminal): commands then use it.")


CONFIG_HELP = "YAML config file (see configs/); defaults are the CPU demo recipe."


FLOW_KINDS = {"demo": "DemoConfig", "benchmark": "BenchmarkConfig", "pipeline": "PipelineConfig",
              "nightly": "PipelineConfig", "discriminator": "DiscriminatorSFTConfig"}
"""Config kinds of the flows that are not RL recipes; each recipe's name and aliases are kinds
too (``advrag.recipes.RECIPES``)."""

SET_HELP = ("Override a setting, as `key.sub=value` (the value read as YAML), repeatable; "
            "validated like the file and part of the config hash.")


def recipe_kinds() -> dict[str, type]:
    """Recipe config kind (its name, and its CLI aliases) → its recipe class."""
    from advrag.recipes import RECIPES

    return {kind: recipe for recipe in RECIPES.values() for kind in (recipe.name, *recipe.aliases)}


def recipe_names() -> list[str]:
    """The recipes of the one table, in its order."""
    from advrag.recipes import RECIPES

    return list(RECIPES)


def config_kinds() -> list[str]:
    """Every config kind: the flows', then the recipes' (``recipe_kinds``)."""
    return [*FLOW_KINDS, *recipe_kinds()]


@contextmanager
def config_errors() -> Iterator[None]:
    """A bad or missing config file: its one message on stderr and exit 2, no traceback."""
    from advrag.config import ConfigError

    try:
        yield
    except (ConfigError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def overrides_of(settings: list[str] | None) -> dict | None:
    """The ``--set`` options as one nested mapping; a malformed one exits 2."""
    from advrag.config import ConfigError, parse_overrides

    if not settings:
        return None
    try:
        return parse_overrides(settings)
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def load(path: Path, kind: str, overrides: dict | None = None):
    """The config file ``path`` (+ ``overrides``) validated as ``kind``; a bad one exits 2.

    Commands call it before importing their flow: a typo fails in a fraction of a second.
    """
    from advrag.config import load_config

    with config_errors():
        config = load_config(path, config_model(kind), overrides)
    check_device()
    return config


def check_device() -> None:
    """A typo in ``$ADVRAG_DEVICE`` exits 2, before anything loads a model."""
    from advrag.common.device import requested_device

    try:
        requested_device()
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def config_model(kind: str) -> type:
    """The config model of ``kind`` (``config_kinds``)."""
    from advrag import config

    recipes = recipe_kinds()
    if kind in recipes:
        return recipes[kind].config_model
    if kind not in FLOW_KINDS:
        kinds = config_kinds()
        hint = config.did_you_mean(kind, kinds) or f"choose one of {', '.join(kinds)}"
        raise config.ConfigError(f"--kind: unknown kind {kind!r} — {hint}")
    return getattr(config, FLOW_KINDS[kind])


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


@app.command()
def benchmark(
    config: Path = typer.Option(Path("configs/demo.yaml"), help=CONFIG_HELP),
    model: str | None = typer.Option(None, help="Override the policy (dir, .gguf, hub id, models:/…)."),
    limit: int | None = typer.Option(None, help="Override the number of questions per dataset."),
    methods: str | None = typer.Option(None, help="Comma-separated methods, e.g. cot,arr."),
    prepare: bool = typer.Option(False, "--prepare-data", help="First build, gate and index the "
                                 "config's data (a fresh clone's four-method benchmark)."),
) -> None:
    """Flow: evaluate methods on datasets and log to MLflow."""
    updates = {"model": model, "limit": limit, "methods": methods.split(",") if methods else None}
    changed = {k: v for k, v in updates.items() if v is not None}
    cfg = load(config, "demo", {"benchmark": changed} if changed else None)
    from advrag.flows.benchmark import benchmark as flow

    if prepare:
        from advrag.flows.prepare_data import prepare_data

        prepare_data(cfg.data)
    result = flow(cfg.benchmark)
    typer.echo(f"MLflow run {result['run_id']}: make ui, then http://127.0.0.1:5000")


RUN_NAME_HELP = "MLflow run name (default: the config's file name)."


@app.command()
def rl(
    config: Path = typer.Option(..., help="Config of any recipe; its `recipe:` picks it (one of "
                                f"{', '.join(recipe_names())})."),
    run_name: str | None = typer.Option(None, help=RUN_NAME_HELP),
    settings: list[str] = typer.Option(None, "--set", help=SET_HELP),
    engine: str = typer.Option("local", help="local (this machine, CPU or GPU) or verl (verl's "
                               "trainer on Ray and GPUs; recipes grpo and ur2: docs/verl.md)."),
    dry_run: bool = typer.Option(False, help="With --engine verl: write the data, print the "
                                 "command and verl's composed config, launch nothing."),
    gpus: int = typer.Option(1, min=1, help="With --engine verl: GPUs per node."),
    nodes: int = typer.Option(1, min=1, help="With --engine verl: nodes."),
    retriever_url: str = typer.Option("http://127.0.0.1:8000", help="With --engine verl: the "
                                      "retrieval server the rollout workers search "
                                      "(advrag serve-retriever)."),
    out_dir: Path = typer.Option(Path(".cache/advrag/verl"), help="With --engine verl: where "
                                 "the parquet data and the agent loop file are written."),
) -> None:
    """Flow: train the recipe a config names (resumes from its latest checkpoint)."""
    if engine == "verl":
        run_on_verl(config, overrides_of(settings), dry_run=dry_run, gpus=gpus, nodes=nodes,
                    retriever_url=retriever_url, out_dir=out_dir)
        return
    if engine != "local":
        typer.echo(f"error: --engine {engine!r}: choose local or verl", err=True)
        raise typer.Exit(2)
    run_recipe_config(config, run_name, overrides_of(settings))


def run_on_verl(config: Path, overrides: dict | None, *, dry_run: bool, gpus: int, nodes: int,
                retriever_url: str, out_dir: Path) -> None:
    """``--engine verl``: refusals checked here (one error line), then the flow ``rl-verl``
    prepares, launches and brings the model back; with ``dry_run``, each run printed."""
    from advrag.recipes import recipe_for

    with config_errors():
        recipe = recipe_for(config, overrides)
    settings = recipe.config
    try:
        from advrag.config.flows import VerlSection
        from advrag.engines.verl import launch

        verl = VerlSection(gpus=gpus, nodes=nodes, retriever_url=retriever_url, out_dir=out_dir)
        launch.refuse_unmapped(settings)
        if dry_run:
            show_verl_runs(recipe, verl)
            return
        launch.require_gpu()
    except ImportError as error:
        typer.echo(f"error: --engine verl needs verl ({error}): `make verl` on a CPU, "
                   "`pip install advrag[verl]` on GPU machines", err=True)
        raise typer.Exit(1) from None
    except (ValueError, RuntimeError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    from advrag.flows.verl import rl_on_verl

    rl_on_verl(recipe, verl)


def show_verl_runs(recipe, verl) -> None:
    """``--dry-run``: each verl run's data written, its command and composed config printed
    (UR²: one per stage, on the uncurated questions; curation runs at the launch)."""
    from omegaconf import OmegaConf

    from advrag.engines.verl import launch
    from advrag.flows.verl import prepare_run
    from advrag.models.loading import resolve_model_dir

    model = resolve_model_dir(recipe.config.model)
    if recipe.config.recipe != "ur2":
        runs = [prepare_run(recipe, verl, model)]
    else:
        records = recipe.training_questions()
        runs = [prepare_run(recipe, verl, model, stage, records)
                for stage in launch.ur2_stage_steps(recipe.config)]
    for hydra_overrides, composed in runs:
        typer.echo(launch.shown(hydra_overrides))
        typer.echo(OmegaConf.to_yaml(composed))


def run_recipe_config(config: Path, run_name: str | None, overrides: dict | None,
                      expected: str | None = None) -> None:
    """Validate the recipe config (a bad one exits 2 before Prefect is imported), then run it;
    ``expected``: the recipe an alias command runs."""
    from advrag.recipes import recipe_for

    with config_errors():
        recipe = recipe_for(config, overrides)
    if expected is not None and recipe.name != expected:
        typer.echo(f"error: {config}: recipe: {recipe.name!r} — this command runs {expected!r} "
                   f"configs; run `advrag rl --config {config}`", err=True)
        raise typer.Exit(2)
    check_device()
    from advrag.flows.rl import rl_flow as flow

    flow(str(config), run_name=run_name or config.stem, overrides=overrides)


def add_recipe_aliases() -> None:
    """`advrag <alias>` for every alias in the recipe table: `rl` on that recipe's default config."""
    for kind, recipe in recipe_kinds().items():
        if kind != recipe.name:
            app.command(kind, help=f"Flow: the {recipe.name} recipe (`advrag rl` with its "
                        f"config, default {recipe.default_config}); resumes from its latest "
                        "checkpoint.")(recipe_alias(recipe.name, recipe.default_config))


def recipe_alias(name: str, default_config: str):
    """The command function of an alias of recipe ``name``."""
    def command(config: Path = typer.Option(Path(default_config), help=CONFIG_HELP),
                run_name: str | None = typer.Option(None, help=RUN_NAME_HELP),
                settings: list[str] = typer.Option(None, "--set", help=SET_HELP)) -> None:
        run_recipe_config(config, run_name, overrides_of(settings), expected=name)

    return command


add_recipe_aliases()


@app.command("policy-hash")
def policy_hash(
    config: Path = typer.Option(Path("configs/ur2.yaml"), help="A config with a `model`."),
    out: Path = typer.Option(..., help="File to write the sha256 of the model's weights to."),
    kind: str = typer.Option("ur2", help="The config's kind: ur2 or discriminator."),
) -> None:
    """Fingerprint the config's policy (the DVC stages `curate` and `gar-slices` depend on it)."""
    if kind not in ("ur2", "discriminator"):
        typer.echo(f"error: --kind {kind!r}: choose ur2 or discriminator", err=True)
        raise typer.Exit(2)
    cfg = load(config, kind)
    from advrag.common.fileio import atomic_write_text
    from advrag.curation.curate import policy_fingerprint
    from advrag.models.loading import resolve_model_dir

    atomic_write_text(out, [policy_fingerprint(resolve_model_dir(cfg.model)), "\n"])


WORLD_DIR_HELP = ("The QA splits to read in place of the config's world_dir: the world's or "
                  "your files' (data/files); dvc.yaml passes params.yaml's data.dir.")


@app.command()
def curate(
    config: Path = typer.Option(Path("configs/ur2.yaml"), help="A UR² config (its curate section)."),
    policy: str | None = typer.Option(None, help="Policy to roll out (default: the config's model)."),
    world_dir: Path | None = typer.Option(None, help=WORLD_DIR_HELP),
) -> None:
    """Flow: UR² difficulty curation — k rollouts per question, levels, a 7:2:1 sample (resumable)."""
    cfg = load(config, "ur2", world_dir and {"world_dir": str(world_dir)})
    if cfg.curate is None:
        typer.echo(f"error: {config}: curate: is null — give a curate section to curate", err=True)
        raise typer.Exit(2)
    from advrag.flows.curate import curate_flow

    curate_flow(cfg, policy=policy)


@app.command("discriminator-sft")
def discriminator_sft(
    config: Path = typer.Option(Path("configs/discriminator.yaml"), help="A discriminator SFT config."),
    base: str | None = typer.Option(None, help="Base model of the adapter (default: the config's model)."),
) -> None:
    """Flow: GAR's discriminator SFT — judge-labelled slices (1:1), LoRA SFT, held-out scores, register."""
    cfg = load(config, "discriminator")
    from advrag.flows.discriminator_sft import discriminator_sft as flow

    flow(cfg, base=base)


@app.command("gar-slices")
def gar_slices(
    config: Path = typer.Option(Path("configs/discriminator.yaml"), help="A discriminator SFT config."),
    base: str | None = typer.Option(None, help="Model whose tokenizer and chat template cut the "
                                    "slices (default: the config's model)."),
    world_dir: Path | None = typer.Option(None, help=WORLD_DIR_HELP),
) -> None:
    """Flow: the discriminator's slice set alone (labelled, balanced 1:1, gated) — DVC stage gar-slices."""
    cfg = load(config, "discriminator", world_dir and {"world_dir": str(world_dir)})
    from advrag.flows.discriminator_sft import gar_slices as flow

    result = flow(cfg, base=base)
    typer.echo(f"{result['slices']}: {result['rows']} slices, sha256 {result['slices_version']}")


@app.command()
def pipeline(
    config: Path = typer.Option(Path("configs/pipeline.yaml"), help="A pipeline config."),
) -> None:
    """Flow: data → warm-up → discriminator SFT → joint RL → benchmark → promotion (resumable)."""
    run_pipeline(config)


@app.command()
def demo(config: Path = typer.Option(Path("configs/pipeline-demo.yaml"),
                                     help="A pipeline config.")) -> None:
    """The main job (`make demo`): the pipeline at demo scale, on the CPU."""
    run_pipeline(config)


def run_pipeline(path: Path) -> None:
    """The pipeline on ``path``: its stages' bars, its table and where to look on the terminal,
    everything else in a log file (``advrag.common.console``), logged to the pipeline's run."""
    cfg = load_pipeline(path)
    from advrag.common import console

    with console.session("pipeline", until_exit=True) as session:
        session.say(f"advrag pipeline {path} (everything but the stages: {session.log_path})")
        from advrag.flows.pipeline import pipeline as flow
        from advrag.tasks import tracking

        result = flow(cfg)
        tracking.log_file(result["run_id"], session.log_path, "logs")
        session.say(f"\n{result['table']}\n\n"
                    f"{where_to_look(cfg.experiment, result['run_id'], session.log_path)}")


def where_to_look(experiment: str, run_id: str, log_path: Path) -> str:
    """The lines after the pipeline's table: its MLflow run, the UIs, the log."""
    return (f"MLflow: experiment {experiment}, run {run_id}\n"
            "UIs: make ui (or advrag ui), then MLflow at http://127.0.0.1:5000 and Prefect at "
            "http://127.0.0.1:4200\n"
            f"Log: {log_path} (also in the run's artifacts, logs/{log_path.name})")


def load_pipeline(path: Path):
    """A pipeline config whose recipe loads and benchmarks the promotion gate's method; a bad
    one exits 2 before Prefect is imported."""
    cfg = load(path, "pipeline")
    from advrag.recipes import recipe_for

    with config_errors():
        recipe = recipe_for(cfg.recipe)
    evaluate = recipe.config.evaluate
    if evaluate is None or cfg.promotion.method not in evaluate.methods:
        typer.echo(f"error: {cfg.recipe}: evaluate: must run promotion.method "
                   f"{cfg.promotion.method!r} — the promotion gate compares its per-question EM",
                   err=True)
        raise typer.Exit(2)
    return cfg


NIGHTLY_CONFIG = typer.Option(Path("configs/nightly.yaml"), help="Nightly config (configs/nightly.yaml).")
MODEL = typer.Option(None, help="Registered model of the config (default: its reasoner; the "
                     "SFT discriminator, e.g. advrag-discriminator, has a gate of its own).")


@app.command()
def nightly(config: Path = NIGHTLY_CONFIG) -> None:
    """Flow: the pipeline on the night's config — data refresh → GX gate → dvc repro → warm-up →
    discriminator SFT → joint RL → benchmark → promotion gates (what the schedule runs)."""
    load_pipeline(config)  # the flow loads it again; a bad file fails here, before Prefect
    from advrag.flows.nightly import nightly as flow

    flow(str(config))


def gated_model(config: Path, model: str | None) -> str:
    """The registered model ``model`` names (default: the reasoner); an unknown one exits 2."""
    cfg = load(config, "nightly")
    from advrag.flows.nightly import gated_model as find

    with config_errors():
        try:
            return find(cfg, model)[0]
        except ValueError as err:
            typer.echo(f"error: {config}: {err}", err=True)
            raise typer.Exit(2) from None


@app.command()
def promote(
    version: str | None = typer.Option(None, help="Registered version to decide on (default: the latest)."),
    config: Path = NIGHTLY_CONFIG,
    force: bool = typer.Option(False, help="Make it champion even if the gate says no (recorded as forced)."),
    model: str | None = MODEL,
) -> None:
    """Promotion gate: `champion` only if it clearly beats the champion on the same items."""
    name = gated_model(config, model)
    from advrag.flows.nightly import promote as flow

    try:
        result = flow(str(config), version, force, name)
    except ValueError as err:  # a model promoted with its reasoner
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{name} v{result['version']}: {result['alias']} ({result['promotion.reason']})")


@app.command()
def rollback(config: Path = NIGHTLY_CONFIG, model: str | None = MODEL) -> None:
    """Give `champion` back to the version the current champion replaced."""
    name = gated_model(config, model)
    from advrag.flows.nightly import rollback as flow

    try:
        result = flow(str(config), name)
    except LookupError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    typer.echo(f"{result['name']}@champion: v{result['demoted']} → v{result['restored']}")


@app.command()
def schedule(
    port: int = typer.Option(4200, help="Port of the local Prefect server (bound to 127.0.0.1)."),
    pool: str = typer.Option("advrag-local", help="Process work pool of the deployment and worker."),
) -> None:
    """Start a local Prefect server, register the nightly deployment, start a worker."""
    from advrag.ops.scheduling import CREDENTIAL_FILE
    from advrag.ops.scheduling import schedule as start

    s = start(Path("."), Path(os.environ["PREFECT_HOME"]), port=port, pool=pool)
    typer.echo(f"Prefect UI {s.ui_url} (API {s.api_url}), server ready in {s.server_start_s:.1f} s")
    typer.echo(f"deployments {', '.join(s.deployments)} on pool {s.pool}; logs and pids in {s.home}")
    typer.echo(f"run one now: PREFECT_API_URL={s.api_url} PREFECT_API_AUTH_STRING=\"$(cat "
               f"{s.home / CREDENTIAL_FILE})\" prefect deployment run 'nightly/nightly'")
    typer.echo("stop: advrag unschedule")


@app.command()
def unschedule() -> None:
    """Stop the worker, then the local Prefect server."""
    from advrag.ops.scheduling import unschedule as stop

    stopped = stop(Path(os.environ["PREFECT_HOME"]))
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def ui(
    mlflow_port: int = typer.Option(5000, help="Port of the MLflow UI (bound to 127.0.0.1)."),
    prefect_port: int = typer.Option(4200, help="Port of the Prefect UI (bound to 127.0.0.1)."),
    config: Path = typer.Option(Path("configs/demo.yaml"), help="Config naming the benchmark experiment."),
) -> None:
    """The MLflow UI (.mlflow/) and the Prefect UI (PREFECT_HOME) on the demo's stores; Ctrl-C stops both."""
    from advrag.ops import ui as servers
    from advrag.ops.scheduling import CREDENTIAL_FILE
    from advrag.tasks import tracking

    store, notes = tracking.DEFAULT_DIR, []
    if (store / "mlflow.db").is_file():
        tracking.configure(tracking.default_uri(store))
        experiment = load(config, "demo").benchmark.experiment
        route = tracking.share_runs_view(experiment, *servers.EM_F1_VIEW)
        if route:
            notes.append(f"EM/F1 of every {experiment} run: http://{servers.HOST}:{mlflow_port}/{route}")
    home = Path(os.environ["PREFECT_HOME"])
    specs = [servers.mlflow_spec(store / "mlflow.db", store / "artifacts", mlflow_port),
             servers.prefect_spec(home, prefect_port)]
    notes.append(f"Prefect asks for this project's password once per browser: it is in "
                 f"{home / CREDENTIAL_FILE} (mode 0600)")
    try:
        servers.serve(specs, typer.echo, tuple(notes))
    except servers.UIError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    except KeyboardInterrupt:  # during start-up: what had started is already stopped
        pass
    typer.echo("stopped.")


config_app = typer.Typer(help="Inspect run configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    file: Path = typer.Argument(..., help="A config file (configs/*.yaml)."),
    kind: str | None = typer.Option(None, help="One of the flows' kinds (demo, benchmark, "
                                    "pipeline, nightly, discriminator) or a recipe's; default: "
                                    "its `recipe:`, else the kind whose fields its keys match best."),
    settings: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Print the resolved config (extends: and --set applied, every default filled in) and its
    hash."""
    import yaml

    from advrag.config import config_hash, load_config

    overrides = overrides_of(settings)
    with config_errors():
        model = config_model(kind) if kind else guess_model(file, overrides)
        cfg = load_config(file, model, overrides)
    typer.echo(f"# {file} as {model.__name__}; hash {config_hash(cfg)}")
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False).rstrip())


def guess_model(file: Path, overrides: dict | None = None) -> type:
    """The config model a file is for: its ``recipe:``'s, else the one sharing the most
    top-level keys with it (ties: the first of demo, pipeline, benchmark, grpo, arr)."""
    from advrag import config
    from advrag.recipes import RECIPES

    raw = config.merged(config.read_yaml_mapping(file, chain=()), overrides or {})
    if str(raw.get("recipe")) in RECIPES:
        return RECIPES[str(raw["recipe"])].config_model
    models = [config_model(kind) for kind in ("demo", "pipeline", "benchmark", "grpo", "arr",
                                              "discriminator")]
    return max(models, key=lambda model: len(raw.keys() & model.model_fields.keys()))


def main() -> None:
    """The `advrag` command: re-executed once with tcmalloc preloaded where it is installed
    (``advrag.common.allocator``), then run. A bad ``$ADVRAG_ALLOCATOR``: its message, exit 2;
    Prefect's temporary server not starting: one line with the fix, exit 1."""
    from advrag.common.allocator import use_tcmalloc

    try:
        use_tcmalloc()
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    try:
        app()
    except RuntimeError as err:
        if PREFECT_START_FAILED not in str(err):
            raise
        typer.echo(prefect_start_fix(), err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
