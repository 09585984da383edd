"""`advrag` pipeline commands: `pipeline`, `demo` (what `make demo` runs), `nightly`, and
the registry's `promote` and `rollback`."""

from __future__ import annotations

from pathlib import Path

import typer

from advrag.cli.base import app, config_errors, load


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
