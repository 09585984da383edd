"""The `advrag` app, its environment and what every command group shares: config loading
with its errors, overrides, the device check, the config kinds, and `main`."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

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
        from advrag.ops.scheduling import local_api, project_credential

        home = Path(os.environ["PREFECT_HOME"])
        url = local_api(home)
        if url is not None:  # the server of PREFECT_HOME: its credential
            os.environ["PREFECT_API_URL"] = url
            os.environ["PREFECT_API_AUTH_STRING"] = project_credential(home)
        else:  # Prefect's temporary server: one already started here keeps its credential
            os.environ["PREFECT_API_AUTH_STRING"] = os.environ.setdefault(
                "PREFECT_SERVER_API_AUTH_STRING", project_credential(home))


PREFECT_START_FAILED = "Timed out while attempting to connect to ephemeral Prefect API"


def prefect_start_fix() -> str:
    """The one line a command prints when Prefect's temporary server did not start in time."""
    limit = os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "?")
    return (f"error: Prefect's temporary server did not answer within {limit} s (a busy "
            "machine?). Rerun with PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=600, or "
            "start a server first with `advrag ui` (in another terminal): commands then use it.")


CONFIG_HELP = "YAML config file (see configs/); defaults are the CPU demo recipe."


FLOW_KINDS = {"demo": "advrag.config:DemoConfig", "benchmark": "advrag.config:BenchmarkConfig",
              "pipeline": "advrag.config:PipelineConfig",
              "nightly": "advrag.config:PipelineConfig",
              "discriminator": "advrag.recipes.gar:DiscriminatorSFTConfig"}
"""Config kinds of the flows that are not RL recipes (kind → ``module:class`` of its config;
the discriminator's SFT config is the ``gar`` recipe's); each recipe's name and aliases are
kinds too (``advrag.recipes.RECIPES``)."""

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
    module, name = FLOW_KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name)
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
