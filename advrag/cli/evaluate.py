"""`advrag benchmark`: the benchmark flow on a config."""

from __future__ import annotations

from pathlib import Path

import typer

from advrag.cli.base import CONFIG_HELP, app, load


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
