"""`advrag` local operations: `schedule`/`unschedule` (Prefect server, pool, deployment and
worker) and `ui` (the MLflow and Prefect UIs)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from advrag.cli.base import app, load


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
