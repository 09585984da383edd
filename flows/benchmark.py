"""Flow `benchmark`: evaluate methods on QA datasets and log everything to MLflow."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from advrag.common import console
from advrag.common.locks import shared
from advrag.config import BenchmarkConfig
from advrag.tasks import benchmark as bench
from advrag.tasks import data, tracking


@flow(name="benchmark", log_prints=True)
def benchmark(config: BenchmarkConfig = BenchmarkConfig(), run_name: str = "benchmark") -> dict:
    """Methods × datasets → EM/F1 with bootstrap CIs → predictions on disk → MLflow (table, plot)."""
    tracking.configure()
    version = data.data_version()
    tags = {"data.version": version["digest"], "flow": "benchmark", "model": config.model}
    with shared(Path(config.world_dir).parent, "the data directory"), \
            tracking.tracked_run(config.experiment, run_name, params={
                "config": config.model_dump(mode="json"), "data": version}, tags=tags) as run_id:
        questions = {name: bench.load_questions(source, config)  # a bad entry fails here, first
                     for name, source in config.dataset_specs()}
        generators = bench.load_generator(config)
        retriever = bench.load_retriever(config) if needs_retrieval(config) else None
        results, out = {}, (config.predictions_dir / run_id).absolute()
        total = len(config.methods) * sum(map(len, questions.values()))
        with console.progress(f"benchmark {run_name}", total, "questions") as bar:
            for name, records in questions.items():
                for method in config.methods:
                    rows = bench.evaluate(method, name, records, generators, retriever, config,
                                          bar.update)
                    results[(method, name)] = bench.save_method_results(out, method, name, rows,
                                                                        config.seed)
        table = bench.write_results_table(out, results)
        print(table)
        bench.log_results(run_id, out, results, table)
    return {"run_id": run_id, "results": results, "table": table, "predictions": out}


def needs_retrieval(config: BenchmarkConfig) -> bool:
    """Only chain-of-thought runs without a retriever."""
    return any(m != "cot" for m in config.methods)
