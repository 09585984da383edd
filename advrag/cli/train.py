"""`advrag` training commands: `rl` (local or verl), the recipe aliases derived from the
recipe table, `policy-hash`, UR²'s curation and GAR's discriminator and slices."""

from __future__ import annotations

from pathlib import Path

import typer

from advrag.cli.base import (
    CONFIG_HELP,
    SET_HELP,
    app,
    check_device,
    config_errors,
    load,
    overrides_of,
    recipe_kinds,
    recipe_names,
)

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
    try:
        from advrag.config.flows import VerlSection
        from advrag.engines.verl import launch

        verl = VerlSection(gpus=gpus, nodes=nodes, retriever_url=retriever_url, out_dir=out_dir)
        recipe.refuse_verl()
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
    """``--dry-run``: each of the recipe's verl runs (``Recipe.verl_runs``) has its data
    written and its command and composed config printed (UR²: one per stage, on the
    uncurated questions; curation runs at the launch)."""
    from omegaconf import OmegaConf

    from advrag.engines.verl import launch
    from advrag.flows.verl import prepare_run
    from advrag.models.loading import resolve_model_dir

    model = resolve_model_dir(recipe.config.model)
    for run in recipe.verl_runs():
        hydra_overrides, composed = prepare_run(recipe.config, run, verl, model)
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
    from advrag.recipes.ur2 import UR2Recipe

    curate_flow(UR2Recipe(cfg), policy=policy)


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
