"""`advrag config show`: a run config resolved (defaults, `extends:` and overrides)."""

from __future__ import annotations

from pathlib import Path

import typer

from advrag.cli.base import SET_HELP, app, config_errors, config_model, overrides_of

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
