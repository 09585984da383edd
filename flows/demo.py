"""Flow `demo`: the main job on the embedded defaults (offline, CPU)."""

from __future__ import annotations

from prefect import flow

from advrag.config import DemoConfig
from advrag.flows.benchmark import benchmark
from advrag.flows.prepare_data import prepare_data
from advrag.tasks import tracking


@flow(name="demo", log_prints=True)
def demo(config: DemoConfig = DemoConfig()) -> dict:
    """prepare_data → benchmark, then say where to look at the results."""
    prepare_data(config.data)
    result = benchmark(config.benchmark, run_name="demo")
    uri = tracking.configure()
    print(f"\nMLflow run {result['run_id']} in {uri}")
    print("Open the MLflow UI:  make ui   (then http://127.0.0.1:5000)")
    return result
