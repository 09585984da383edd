"""Prefect tasks of the benchmark: load model, retriever and questions; evaluate; log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.common.fileio import atomic_write_text
from advrag.config import BenchmarkConfig
from advrag.datasets.records import QARecord
from advrag.evaluation import methods, reports, scoring
from advrag.evaluation.methods import Generators
from advrag.tasks import tracking


@task(cache_policy=NO_CACHE)
def load_generator(config: BenchmarkConfig) -> Generators:
    """The policy as a batched generator (and ARR's verifier if separate); ``models:/`` from MLflow."""
    from advrag.common.device import pick_device
    from advrag.engines.local.generation import HFGenerator, pack_fp16_weights, pick_dtype
    from advrag.models.loading import load_policy

    dtype = pick_dtype(config.dtype)
    packed = dtype == "float16" and pick_device() == "cpu"  # fp16 weights, fp32 activations

    def generator(spec: str) -> HFGenerator:
        if spec.startswith("models:/"):
            spec = str(tracking.download_model(spec))
        policy = load_policy(spec, dtype="float32" if packed else dtype)
        model = pack_fp16_weights(policy.model) if packed else policy.model
        return HFGenerator(model, policy.tokenizer, batch_size=config.batch_size)

    if config.verifier_model is None or "arr" not in config.methods:
        return Generators(generator(config.model))
    return Generators(generator(config.model), generator(config.verifier_model))


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=3)
def load_retriever(config: BenchmarkConfig):
    """The local index built by `dvc repro`, or a running retrieval server."""
    from advrag.retrieval.retriever import HttpRetriever
    from advrag.retrieval.retriever import load_retriever as load_local

    if config.retriever_url:
        return HttpRetriever(config.retriever_url)
    index_dir = config.index_dir if config.retriever == "dense" else config.index_dir.parent / "bm25"
    return load_local(index_dir, kind=config.retriever)


@task
def load_questions(source: str, config: BenchmarkConfig) -> list[QARecord]:
    """Questions of one dataset: the world, a standard benchmark name, or a file."""
    from advrag.datasets.loaders import dataset_file, load_qa

    path = dataset_file(source, config.split, config.datasets_root, config.world_dir)
    return load_qa(path, limit=config.limit)


@task(cache_policy=NO_CACHE)
def evaluate(method: str, dataset: str, records: list[QARecord], generators: Generators, retriever,
             config: BenchmarkConfig, answered: Callable[[int], object] | None = None
             ) -> list[dict]:
    """Run one method over the questions in batches, calling ``answered(n)`` (a progress
    bar's ``update``) after each batch of ``n``; score each."""
    recorder = methods.RecordingRetriever(retriever)
    outputs: list[methods.MethodOutput] = []
    step = config.batch_size
    for start in range(0, len(records), step):
        questions = [r.question for r in records[start:start + step]]
        outputs += methods.run_method(method, questions, generators, recorder, config)
        if answered is not None:
            answered(len(questions))
    return scoring.score_rows(records, outputs)


@task(cache_policy=NO_CACHE)
def save_method_results(out_dir: Path, method: str, dataset: str, rows: list[dict],
                        seed: int) -> dict[str, float]:
    """Summarise one (method, dataset) and write rows + summary to ``out_dir/dataset/method.json``.

    Runs before anything is logged, so a tracking failure never loses an evaluation.
    """
    summary = scoring.summarize(rows, seed=seed) | scoring.kind_metrics(rows, seed=seed)
    payload = json.dumps({"method": method, "dataset": dataset, "summary": summary,
                          "rows": rows}, indent=1, default=str)
    atomic_write_text(out_dir / dataset / f"{method}.json", [payload])
    return summary


@task(cache_policy=NO_CACHE)
def write_results_table(out_dir: Path, results: dict[tuple[str, str], dict[str, float]]) -> str:
    """The markdown results table, also written to ``out_dir/results.md``."""
    table = reports.results_markdown(results)
    atomic_write_text(out_dir / "results.md", [table])
    return table


@task(cache_policy=NO_CACHE)
def log_results(run_id: str, out_dir: Path, results: dict[tuple[str, str], dict[str, float]],
                table: str) -> None:
    """Metrics, per-question tables, averages per method, the table and the bar plot to MLflow.

    A failure names where the evaluation's files are (the run is then marked failed).
    """
    try:
        for (method, dataset), summary in results.items():
            tracking.log_metrics(run_id, {f"{dataset}/{method}/{k}": v for k, v in summary.items()})
            rows = json.loads((out_dir / dataset / f"{method}.json").read_text())["rows"]
            tracking.log_table(run_id, rows, f"predictions/{dataset}/{method}.json")
        log_averages(run_id, results)
        tracking.log_text(run_id, table, "results.md")
        tracking.log_figure(run_id, reports.results_figure(results), "results.png")
    except Exception as err:
        raise RuntimeError(f"logging the benchmark to MLflow failed ({type(err).__name__}: "
                           f"{err}); its predictions, summaries and table are in {out_dir}") from err


def log_averages(run_id: str, results: dict[tuple[str, str], dict[str, float]]) -> None:
    """EM and F1 of each method averaged over the datasets (``avg/<method>/em|f1``)."""
    for method in {m for m, _ in results}:
        per_dataset = [s for (m, _), s in results.items() if m == method]
        averages = {k: sum(s[k] for s in per_dataset) / len(per_dataset) for k in ("em", "f1")}
        tracking.log_metrics(run_id, {f"avg/{method}/{k}": v for k, v in averages.items()})
